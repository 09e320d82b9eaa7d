"""Synthetic tasks: what the generated sequences contain, and what is scored."""

from __future__ import annotations

import pytest
import torch

from poslab.config import compose
from poslab.data.sequence_tasks import FIRST_SYMBOL, IGNORE, SEP, generate, task_size
from poslab.errors import ConfigError
from poslab.tasks.sequence import exact_match


def gen(task, size, batch=4, depth=None, symbols=32):
    return generate(task, size, batch, symbols, torch.Generator().manual_seed(0), depth)


@pytest.mark.parametrize("task", ["copy", "reverse"])
def test_copy_and_reverse_answers(task):
    item = gen(task, 5)
    seq, mask = item["windows"], item["answer_mask"]
    assert seq.shape == (4, 11) and torch.all(seq[:, 5] == SEP)
    prompt, answer = seq[:, :5], seq[:, 6:]
    assert torch.equal(answer, prompt if task == "copy" else prompt.flip(-1))
    targets = seq[:, 1:]
    assert torch.equal(targets[mask].view(4, 5), answer)  # exactly the answer is scored


def test_associative_recall_answer_and_depth():
    depth = torch.tensor([0.0, 0.35, 0.7, 0.99])
    item = gen("associative_recall", 10, depth=depth)
    seq = item["windows"]
    assert seq.shape == (4, 23)
    keys, values = seq[:, 0:20:2], seq[:, 1:20:2]
    assert torch.all(seq[:, 20] == SEP)
    for b in range(4):
        assert len(set(keys[b].tolist())) == 10  # distinct keys
        index = int(depth[b] * 10)
        assert seq[b, 21] == keys[b, index] and seq[b, 22] == values[b, index]
    torch.testing.assert_close(item["depth"], torch.tensor([0.0, 0.3, 0.7, 0.9]))
    assert item["answer_mask"].sum(1).eq(1).all() and item["answer_mask"][:, -1].all()
    assert (keys < FIRST_SYMBOL + 32).all() and (values >= FIRST_SYMBOL + 32).all()  # disjoint alphabets


def test_sizes_fit_the_context():
    assert task_size("copy", 32) == 16 and task_size("associative_recall", 32) == 15


def test_exact_match_needs_every_scored_token():
    targets = torch.tensor([[IGNORE, 3, 4], [IGNORE, 3, 4]])
    logits = torch.zeros(2, 3, 6)
    logits[0, 1, 3] = logits[0, 2, 4] = 1  # both right
    logits[1, 1, 3] = logits[1, 2, 5] = 1  # one wrong
    assert exact_match(logits, targets).tolist() == [1.0, 0.0]


def test_sequence_data_needs_the_sequence_task():
    with pytest.raises(ConfigError, match="data=copy needs task.name=sequence"):
        compose(["modality=text", "data=copy"])
    with pytest.raises(ConfigError, match="data=shakespeare needs task.name=lm"):
        compose(["modality=text", "task.name=sequence"])


def test_multi_query_recall_scores_every_answer_and_keeps_the_length_budget(tmp_path):
    item = generate("associative_recall", 6, 8, 32, torch.Generator().manual_seed(0), queries=3)
    seq, mask = item["windows"], item["answer_mask"]
    assert seq.shape == (8, 6 * 2 + 1 + 3 * 2) and torch.all(seq[:, 12] == SEP)
    for b in range(8):
        table = dict(zip(seq[b, 0:12:2].tolist(), seq[b, 1:12:2].tolist(), strict=True))
        asked = seq[b, 13::2].tolist()
        assert len(set(asked)) == 3  # distinct pairs
        assert seq[b, 14::2].tolist() == [table[q] for q in asked]
    targets = seq[:, 1:]
    assert mask.sum(1).eq(3).all() and torch.equal(targets[mask].view(8, 3), seq[:, 14::2])
    from poslab.data.sequence import SequenceDataModule

    overrides = ["modality=text", "task.name=sequence", "data=associative_recall", "data.context=32"]
    cfg = compose([*overrides, "data.queries=4"])
    dm = SequenceDataModule(cfg.data)
    dm.setup()
    batches = iter(dm.train_dataloader())
    longest = max(next(batches)["windows"].shape[1] - 1 for _ in range(50))
    assert longest <= cfg.data.context  # Q queries cost Q - 1 pairs: training stays within the context
