"""Passkey retrieval (eval.passkey_lengths): prompts of exactly the evaluated length in the run's tokens, the key
at each depth, retrieved when greedy decoding would write all of it."""

from __future__ import annotations

import pytest
import torch

from poslab.config.composition import compose
from poslab.errors import DataError
from poslab.modalities.text.passkey import FILLER, KEY_LINE, QUESTION, TASK, depths, passkey_sequence
from poslab.modalities.text.task import LanguageModel
from poslab.run.train import train


def chars(text: str) -> list[int]:
    return [ord(c) for c in text]


@pytest.mark.parametrize("depth", [0.0, 0.5, 1.0])
def test_a_prompt_has_the_length_asked_and_the_key_at_its_depth(depth):
    ids, answer = passkey_sequence(chars, 600, depth, 31415)
    text = "".join(map(chr, ids))
    line = KEY_LINE.format(key=31415)
    assert len(ids) == 601 and answer == len(" 31415") and text.endswith(QUESTION + " 31415")
    assert text.startswith(TASK) and text.count(line) == 1 and FILLER[:40] in text
    filler = 601 - len(chars(TASK + " " + " " + line + " " + " " + QUESTION + " 31415"))
    before = text.index(line) - len(TASK) - 2  # filler characters before the key's line
    assert before == round(depth * filler)


def test_depths_are_evenly_spaced_and_a_length_too_short_for_the_prompt_is_one_line():
    assert depths(5) == [0, 0.25, 0.5, 0.75, 1.0] and depths(1) == [0.5]
    with pytest.raises(DataError, match=r"^a passkey prompt takes \d+ tokens, more than a length of 64"):
        passkey_sequence(chars, 64, 0.5, 12345)


def test_retrieved_only_when_every_key_token_is_the_most_likely():
    """A stand-in model that predicts each target, but at most ``wrong`` of one key token per prompt."""
    targets = torch.tensor([[5, 6, 7, 8, 9], [5, 6, 7, 8, 9], [1, 2, 3, 4, 5]])
    batch = {"tokens": targets, "pos": None, "targets": targets, "answer": torch.tensor([2, 2, 3]),
             "depth": torch.tensor([0, 1, 1])}  # fmt: skip

    def model(tokens, pos):
        logits = torch.nn.functional.one_hot(targets, 16).float()
        logits[1, 3] = torch.nn.functional.one_hot(torch.tensor(0), 16).float()  # prompt 1: a key token wrong
        logits[2, 0] = torch.nn.functional.one_hot(torch.tensor(0), 16).float()  # prompt 2: a prompt token wrong
        return logits

    assert LanguageModel.passkey_retrieved(model, batch).tolist() == [1.0, 0.0, 1.0]


def test_a_run_logs_retrieval_per_length_and_by_depth(tiny_text):
    overrides = [*tiny_text, "data.tokenizer=bpe", "data.vocab_size=300", "eval.passkey_lengths=[320,480]",
                 "eval.passkey_depths=3", "eval.passkey_trials=2"]  # fmt: skip
    summary = train(compose(overrides))
    assert 0 <= summary["metrics"]["passkey/acc@320"] <= 1 and 0 <= summary["metrics"]["passkey/acc@480"] <= 1
    table = summary["tables"]["passkey/acc_by_depth"]
    assert [r[:2] for r in table["rows"]] == [[n, d] for n in (320, 480) for d in (0.0, 0.5, 1.0)]
    assert "passkey/acc_by_depth" in summary["figures"]


def test_a_character_vocabulary_without_digits_notes_why_and_the_run_ends(tiny_text):
    summary = train(compose([*tiny_text, "eval.passkey_lengths=[400]"]))
    assert "passkey/acc@400" not in summary["metrics"]
    (row,) = summary["tables"]["passkey/acc_by_depth"]["rows"]
    assert row[0] == 400 and "is not in the vocabulary" in row[3]
