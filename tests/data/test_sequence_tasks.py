"""Synthetic tasks: what the generated sequences contain, and what is scored."""

from __future__ import annotations

import pytest
import torch

from poslab.config.composition import compose
from poslab.errors import ConfigError
from poslab.modalities.text.sequence_task import exact_match
from poslab.modalities.text.sequence_tasks import FIRST_SYMBOL, IGNORE, SEP, generate, task_size


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
    torch.testing.assert_close(item["depth"], torch.tensor([[0.0], [0.3], [0.7], [0.9]]))
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
    from poslab.modalities.text.sequence import SequenceDataModule

    overrides = ["modality=text", "task.name=sequence", "data=associative_recall", "data.context=32"]
    cfg = compose([*overrides, "data.queries=4"])
    dm = SequenceDataModule(cfg.data)
    dm.setup()
    batches = iter(dm.train_dataloader())
    longest = max(next(batches)["windows"].shape[1] - 1 for _ in range(50))
    assert longest <= cfg.data.context  # Q queries cost Q - 1 pairs: training stays within the context


@pytest.mark.filterwarnings("ignore:You are trying to `self.log")  # the step alone, without a trainer
def test_sequence_val_loss_weights_each_batch_by_its_scored_tokens():
    """val/loss is the mean over every scored answer token: a short last batch counts by its tokens."""
    import torch.nn.functional as F

    from poslab.modalities.text.sequence import SequenceDataModule
    from poslab.tasks import build_task

    cfg = compose(["modality=text", "task.name=sequence", "data=copy", "data.context=32", "model.dim=16"])
    dm = SequenceDataModule(cfg.data)
    dm.setup()
    torch.manual_seed(0)
    task = build_task(cfg, dm).eval()
    generator = torch.Generator().manual_seed(0)
    batches = [dm.as_batch(generate("copy", size, batch, 32, generator)) for size, batch in ((12, 8), (2, 1))]
    total, count = 0.0, 0
    with torch.no_grad():
        for batch in batches:
            task._eval_step(batch, "val", task.val_loss)
            logits = task(batch["tokens"], batch["pos"])
            total += F.cross_entropy(
                logits.flatten(0, 1), batch["targets"].flatten(), ignore_index=IGNORE, reduction="sum"
            ).item()
            count += int((batch["targets"] != IGNORE).sum())
    assert count == 12 * 8 + 2
    assert task.val_loss.compute().item() == pytest.approx(total / count, rel=1e-5)


def _recall_module(*extra):
    from poslab.modalities.text.sequence import SequenceDataModule

    cfg = compose(["modality=text", "task.name=sequence", "data=associative_recall", "data.context=16",
                   "data.symbols=64", "data.queries=3", *extra])  # fmt: skip
    dm = SequenceDataModule(cfg.data)
    dm.setup()
    return dm


def test_a_searched_extension_is_fitted_on_sequences_of_its_length_that_no_test_pass_scores():
    dm = _recall_module()
    fitted, scored = list(dm.search_loader(2, 400)), list(dm.lengen_loader(2))
    size = fitted[0]["windows"].shape[1]
    assert size == scored[0]["windows"].shape[1]  # the length of the pass it serves
    assert sum(item["windows"].shape[0] for item in fitted) == 400 // (size - 1) == 12  # about 400 tokens
    from poslab.modalities.text.sequence_tasks import task_size

    pairs = task_size("associative_recall", 32, 3)
    for seed in (1, 2, 3, 4):  # validation, test, the length study, the sparse test: another draw than each
        other = dm.fixed_set(pairs, seed, count=12)
        assert not torch.equal(other[0]["windows"], fitted[0]["windows"]), seed


def test_recall_at_1x_is_the_longest_training_layout():
    """1x holds as many pairs and asks as many queries as the longest training sequences: in distribution."""
    dm = _recall_module()
    batches = iter(dm.train_dataloader())
    trained = {int(b["answer_mask"].sum(1)[0]): None for _ in range(200) if (b := next(batches))}
    longest_training = max(next(batches)["windows"].shape[1] for _ in range(200))
    evaluated = next(iter(dm.lengen_loader(1)))
    assert evaluated["windows"].shape[1] == longest_training  # same pairs + queries, same length
    assert set(trained) == {1, 2, 3} and evaluated["answer_mask"].sum(1).eq(3).all()
    assert evaluated["windows"].shape[1] - 1 <= 16


def test_bucket_depths_fill_every_bucket_and_cycle_through_its_pairs():
    from poslab.modalities.text.sequence import DEPTH_BUCKETS, SequenceDataModule

    for pairs in (5, 7, 12, 61):
        index = (SequenceDataModule.bucket_depths(300, pairs) * pairs).long()
        bucket = index * DEPTH_BUCKETS // pairs
        assert torch.equal(bucket, torch.arange(300) % DEPTH_BUCKETS)  # sequence i asks from bucket i mod B
        assert set(index.tolist()) == set(range(pairs))  # every pair gets asked


@pytest.mark.parametrize("multiple", [1, 2, 4, 8])
def test_every_depth_bucket_is_filled_at_every_length(multiple):
    """The first query's depth is spread evenly over the buckets; the other queries ask distinct pairs."""
    from poslab.modalities.text.sequence import DEPTH_BUCKETS

    dm = _recall_module()
    items = list(dm.lengen_loader(multiple))
    depth = torch.cat([item["depth"] for item in items])
    assert depth.shape == (dm.cfg.eval_sequences, 3)
    first = (depth[:, 0] * DEPTH_BUCKETS).long()
    assert torch.bincount(first, minlength=DEPTH_BUCKETS).tolist() == [dm.cfg.eval_sequences // DEPTH_BUCKETS] * 5
    pairs = (items[0]["windows"].shape[1] - 1 - 2 * 3) // 2
    assert all(len(set((row * pairs).round().long().tolist())) == 3 for row in depth)  # distinct pairs


def test_flip_flop_reads_repeat_the_last_written_bit_and_every_read_is_scored():
    from poslab.modalities.text.sequence_tasks import ONE, READ, WRITE, ZERO

    generator = torch.Generator().manual_seed(0)
    item = generate("flip_flop", 40, 64, 8, generator, queries=3)
    seq, answer = item["windows"], item["answer_mask"]
    assert seq.shape == (64, 80) and answer.shape == (64, 79)
    for row, mask in zip(seq.tolist(), answer.tolist(), strict=True):
        ops, bits = row[0::2], row[1::2]
        assert ops[0] == WRITE and ops[-1] == READ and ops.count(READ) == 3 and set(bits) <= {ZERO, ONE}
        last = None
        for t, (op, bit) in enumerate(zip(ops, bits, strict=True)):
            if op == WRITE:
                last = bit
            if op == READ:
                assert bit == last and mask[2 * t]  # scored: predicted from the read instruction
        assert sum(mask) == 3


def test_flip_flop_evaluation_makes_writes_sparser_by_the_multiple():
    def writes(sparsity):
        from poslab.modalities.text.sequence_tasks import WRITE

        item = generate("flip_flop", 200, 200, 8, torch.Generator().manual_seed(1), queries=2, sparsity=sparsity)
        return (item["windows"][:, 2::2] == WRITE).float().mean().item()  # after the first instruction

    assert writes(1.0) == pytest.approx(1 / 9, rel=0.1)
    assert writes(4.0) == pytest.approx(1 / 36, rel=0.15)


def _flip_flop_module(**eval_overrides):
    from poslab.modalities.text.sequence import SequenceDataModule

    overrides = [f"eval.{k}={v}" for k, v in eval_overrides.items()]
    cfg = compose(["modality=text", "experiment=flip_flop", "data.eval_sequences=400", *overrides])
    dm = SequenceDataModule(cfg.data, cfg.get("seed", 0))
    dm.setup()
    return dm


def _write_share(loader) -> float:
    from poslab.modalities.text.sequence_tasks import READ, WRITE

    ops = torch.cat([item["windows"][:, 2::2] for item in loader])  # every instruction after the first write
    return ((ops == WRITE).sum() / (ops != READ).sum()).item()


def test_flip_flop_length_study_keeps_the_training_writes_and_the_sparse_test_the_training_length():
    """Liu et al.'s two out-of-distribution axes, kept apart: m x the length with writes as frequent as in
    training, and the training length with writes s times rarer."""
    from poslab.modalities.text.sequence_tasks import WRITE_SHARE

    dm = _flip_flop_module()
    for multiple in (2, 4):
        loader = list(dm.lengen_loader(multiple))
        assert loader[0]["windows"].shape[1] == multiple * (dm.size * 2)  # m x the instructions
        assert _write_share(loader) == pytest.approx(WRITE_SHARE, rel=0.15)  # not sparser
    for sparsity in (4.0, 11.0):
        loader = list(dm.sparse_loader(sparsity))
        assert loader[0]["windows"].shape[1] == dm.size * 2  # the training length
        assert _write_share(loader) == pytest.approx(WRITE_SHARE / sparsity, rel=0.3)


def test_sparsity_is_refused_outside_flip_flop():
    with pytest.raises(ConfigError, match="eval.sparsity applies to data=flip_flop only"):
        compose(["modality=text", "task.name=sequence", "data.name=copy", "eval.sparsity=[4]"])
    with pytest.raises(ConfigError, match="eval.sparsity"):
        compose(["modality=text", "experiment=flip_flop", "eval.sparsity=[0.5]"])
