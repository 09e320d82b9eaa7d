"""LongRoPE2's needle-driven fitness data: prompts of exactly the searched length, the needle stated at the start
and asked for at the end, only its tokens scored."""

from __future__ import annotations

import random
import string

import pytest
import torch

from poslab.errors import DataError
from poslab.modalities.text.lengen import answer_losses
from poslab.modalities.text.needle import NEEDLE_LINE, QUESTION, draw_needle, needle_items, needle_sequence


def chars(text: str) -> list[int]:
    return [ord(c) for c in text]


def letters_only(text: str) -> list[int]:
    if any(c.isdigit() for c in text):
        raise DataError(f"character {next(c for c in text if c.isdigit())!r} is not in the vocabulary")
    return chars(text)


def test_a_prompt_states_the_needle_first_then_held_out_text_then_asks_for_it_at_the_end():
    haystack = chars("To be, or not to be, that is the question: " * 10)
    ids, answer = needle_sequence(chars, haystack, 200, "4815162")
    text = "".join(map(chr, ids))
    assert len(ids) == 201 and answer == 7 and text[-7:] == "4815162"
    assert text.startswith("The special magic number is: 4815162.\n") and text.startswith(
        NEEDLE_LINE.format(needle="4815162")
    )
    assert text.endswith(QUESTION + "4815162") and text.count("4815162") == 2
    room = 201 - len(NEEDLE_LINE.format(needle="4815162")) - len(QUESTION) - 7
    assert text[len(NEEDLE_LINE.format(needle="4815162")) :][:room] == "".join(map(chr, haystack[:room]))
    # 38 + 30 + 7 characters: the needle's line, the question, the needle
    with pytest.raises(DataError, match=r"^a needle prompt takes 75 tokens, more than a length of 64$"):
        needle_sequence(chars, haystack, 64, "4815162")
    with pytest.raises(DataError, match="needs 126 tokens of held-out text, got 50"):
        needle_sequence(chars, haystack[:50], 200, "4815162")


def test_needles_are_seven_digits_or_seven_letters_where_the_vocabulary_has_no_digits():
    digits = draw_needle(chars, random.Random(0))
    assert len(digits) == 7 and digits.isdigit() and digits[0] != "0"
    letters = draw_needle(letters_only, random.Random(0))
    assert len(letters) == 7 and set(letters) <= set(string.ascii_lowercase)
    assert len({draw_needle(chars, random.Random(seed)) for seed in range(20)}) == 20


def test_each_prompt_takes_its_own_stretch_of_held_out_text_and_the_seed_repeats_the_needles():
    held_out = torch.tensor(chars("".join(string.ascii_letters[i % 52] for i in range(1000))))
    items = needle_items(chars, held_out, 200, 10, seed=3)
    assert len(items) == 5 and all(len(ids) == 201 and answer == 7 for ids, answer in items)  # 1000 // 200
    starts = [len(NEEDLE_LINE.format(needle="0" * 7)) for _ in items]
    assert [ids[s].item() for (ids, _), s in zip(items, starts, strict=True)] == [
        held_out[200 * d].item() for d in range(5)
    ]
    again = needle_items(chars, held_out, 200, 10, seed=3)
    assert all(torch.equal(a, b) for (a, _), (b, _) in zip(items, again, strict=True))
    assert not torch.equal(items[0][0], needle_items(chars, held_out, 200, 10, seed=4)[0][0])
    with pytest.raises(DataError, match="needs 126 tokens of held-out text, got 100"):  # one prompt at least
        needle_items(chars, held_out[:100], 200, 10, seed=3)


def test_only_each_rows_needle_tokens_are_scored():
    losses = torch.arange(12.0).view(2, 6)
    assert answer_losses(losses, torch.tensor([2, 3])).tolist() == [4.0, 5.0, 9.0, 10.0, 11.0]
