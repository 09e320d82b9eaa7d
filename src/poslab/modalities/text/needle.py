"""LongRoPE2's needle-driven fitness data (Shang et al. 2025, §3.2 and Appendix C; the reference's
``examples/longrope2/pg19_needle_llama3.py``): a random needle stated at the start of held-out text and asked
for at its end. Only the needle's tokens at the end are scored: predicting them takes attention across the
whole length, where the rest of the text is mostly predictable from its neighbours and so says little about
whether an extension keeps long-range dependencies (the paper's Table 6: a search scored by plain perplexity
finds worse factors).

The sentences are the reference's, shortened so that a prompt fits in twice a character context of 64
(the reference's instruction alone is 140 characters). The needle is a 7-digit number as there, or 7 lowercase
letters where the run's vocabulary has no digits (a character vocabulary of Shakespeare's text)."""

from __future__ import annotations

import random
import string
from collections.abc import Callable

import torch

from poslab.errors import DataError

NEEDLE_LINE = "The special magic number is: {needle}.\n"
QUESTION = "\nThe special magic number is: "
SYMBOLS = 7  # the reference's needles: random.randint(1000000, 9999999)


def draw_needle(encode: Callable[[str], list[int]], rng: random.Random) -> str:
    """A 7-digit number (no leading zero), or 7 lowercase letters where ``encode`` has no digits."""
    try:
        encode(string.digits)
    except DataError:
        return "".join(rng.choice(string.ascii_lowercase) for _ in range(SYMBOLS))
    return str(rng.randint(10 ** (SYMBOLS - 1), 10**SYMBOLS - 1))


def needle_sequence(
    encode: Callable[[str], list[int]], haystack: list[int], length: int, needle: str
) -> tuple[list[int], int]:
    """``length + 1`` token ids (inputs and the shifted targets): the needle's line, the start of ``haystack``,
    the question, the needle; and how many of the last targets are the needle's tokens."""
    head, question, answer = encode(NEEDLE_LINE.format(needle=needle)), encode(QUESTION), encode(needle)
    room = length + 1 - len(head) - len(question) - len(answer)
    if room < 0:
        raise DataError(f"a needle prompt takes {length + 1 - room} tokens, more than a length of {length}")
    if len(haystack) < room:
        raise DataError(f"a needle prompt of {length} tokens needs {room} tokens of held-out text, got {len(haystack)}")
    return head + list(haystack[:room]) + question + answer, len(answer)


def needle_items(
    encode: Callable[[str], list[int]], held_out: torch.Tensor, length: int, count: int, seed: int
) -> list[tuple[torch.Tensor, int]]:
    """``(ids, answer_tokens)`` for up to ``count`` prompts of ``length`` tokens, each on its own stretch of
    ``held_out`` (at least one), the needles drawn from ``seed`` and the length."""
    rng = random.Random(seed * 1_000_003 + length)
    docs = max(1, min(count, len(held_out) // length))
    items = []
    for doc in range(docs):
        haystack = held_out[doc * length : (doc + 1) * length].tolist()
        ids, answer = needle_sequence(encode, haystack, length, draw_needle(encode, rng))
        items.append((torch.tensor(ids), answer))
    return items
