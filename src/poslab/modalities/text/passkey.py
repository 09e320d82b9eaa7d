"""Passkey retrieval (Mohtashami & Jaggi 2023; the prompt of yarn's ``eval/passkey.py``): a random 5-digit key
stated once inside filler text, asked for at the end. A sequence is built in the run's tokens to exactly the
evaluated length, the key's sentence at a given depth of the filler (0: right after the task, 1: right before
the question). It counts as retrieved when greedy decoding would write the whole key: every key token is the
model's most likely next token given the prompt and the key's tokens before it (teacher forcing; equal to
greedy decoding's outcome, without generating)."""

from __future__ import annotations

import random
from collections.abc import Callable

import torch

from poslab.errors import DataError

TASK = ("There is an important info hidden inside a lot of irrelevant text. Find it and memorize them. "
        "I will quiz you about the important information there.")  # fmt: skip
FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
KEY_LINE = "The pass key is {key}. Remember it. {key} is the pass key."
QUESTION = "What is the pass key? The pass key is"


def depths(count: int) -> list[float]:
    """``count`` depths evenly spaced over [0, 1] (the middle for one)."""
    return [0.5] if count == 1 else [i / (count - 1) for i in range(count)]


def passkey_sequence(encode: Callable[[str], list[int]], length: int, depth: float, key: int) -> tuple[list[int], int]:
    """``length + 1`` token ids (inputs and the shifted targets) and how many of the last targets are the key."""
    head, line = encode(TASK + " "), encode(" " + KEY_LINE.format(key=key) + " ")
    question, answer = encode(" " + QUESTION), encode(f" {key}")
    fixed = len(head) + len(line) + len(question) + len(answer)
    room = length + 1 - fixed
    if room < 0:
        raise DataError(f"a passkey prompt takes {fixed} tokens, more than a length of {length}")
    filler = encode(FILLER * (room // max(1, len(encode(FILLER))) + 2))[:room]
    before = round(depth * room)
    return head + filler[:before] + line + filler[before:room] + question + answer, len(answer)


def passkey_items(encode: Callable[[str], list[int]], length: int, count: int, trials: int, seed: int) -> list[tuple]:
    """``(ids, answer_tokens, depth_index)`` for every depth x trial, keys drawn from ``seed`` and the length."""
    rng = random.Random(seed * 1_000_003 + length)
    items = []
    for index, depth in enumerate(depths(count)):
        for _ in range(trials):
            ids, answer = passkey_sequence(encode, length, depth, rng.randint(10_000, 99_999))
            items.append((torch.tensor(ids), answer, index))
    return items
