"""Synthetic sequence tasks for length generalisation, generated and seeded.

Every sequence is ``<prompt> SEP <answer>`` for a decoder-only model; only the
answer tokens are scored (other targets are ``IGNORE``). Training draws one
length per batch, uniform up to the training size, so no padding is needed;
evaluation uses fixed seeded sets at exactly ``multiple`` × the training size.

* ``copy``: n symbols, then the same n symbols.
* ``reverse``: n symbols, then them reversed.
* ``associative_recall``: K distinct key → value pairs ``k1 v1 … kK vK SEP q``
  and the answer ``v_q``; the queried pair's index / K is its *depth* (0 = the
  start of the context), which evaluation controls to draw the
  "lost in the middle" curve (Liu et al. 2023).

Sizes: ``data.context`` is the training sequence budget; copy / reverse use
n = context // 2 symbols, recall K = (context − 2) // 2 pairs. With
``data.queries=Q`` training recall asks Q pairs and keeps within the budget by
holding Q − 1 fewer pairs; evaluation always asks one, at a controlled depth.
"""

from __future__ import annotations

import torch

PAD, SEP = 0, 1
FIRST_SYMBOL = 2
IGNORE = -100
TASKS = ("copy", "reverse", "associative_recall")


def task_size(task: str, context: int) -> int:
    """Symbols (copy / reverse) or pairs (recall) that fit ``context`` tokens."""
    return max(1, (context - 2) // 2) if task == "associative_recall" else max(1, context // 2)


def vocab_size(symbols: int) -> int:
    return FIRST_SYMBOL + 2 * symbols  # recall uses disjoint key and value alphabets


def generate(
    task: str,
    size: int,
    batch: int,
    symbols: int,
    generator: torch.Generator,
    depth: torch.Tensor | None = None,
    queries: int = 1,
) -> dict[str, torch.Tensor]:
    """``{"windows": [B, T + 1], "answer_mask": [B, T]}`` for one length.

    Recall: ``depth`` in [0, 1) picks the one queried pair (evaluation);
    otherwise ``queries`` distinct pairs are queried one after another
    (``… SEP q1 a1 q2 a2 …``), every answer scored: multi-query recall
    (Arora et al. 2023, "Zoology", MQAR) gives training that many supervised
    tokens per sequence instead of one.
    """
    if task in ("copy", "reverse"):
        x = torch.randint(FIRST_SYMBOL, FIRST_SYMBOL + symbols, (batch, size), generator=generator)
        y = x if task == "copy" else x.flip(-1)
        seq = torch.cat((x, torch.full((batch, 1), SEP), y), dim=1)
        answer = torch.zeros_like(seq[:, 1:], dtype=torch.bool)
        answer[:, size:] = True  # predictions made from SEP onwards are the answer
        return {"windows": seq, "answer_mask": answer}
    if task == "associative_recall":
        if size > symbols:
            raise ValueError(f"{size} distinct keys need data.symbols >= {size}")
        keys = torch.rand(batch, symbols, generator=generator).argsort(-1)[:, :size] + FIRST_SYMBOL
        values = torch.randint(FIRST_SYMBOL + symbols, FIRST_SYMBOL + 2 * symbols, (batch, size), generator=generator)
        if depth is not None:
            which = (depth * size).long().clamp(max=size - 1)[:, None]
        elif queries == 1:
            which = torch.randint(0, size, (batch, 1), generator=generator)
        else:  # distinct pairs, in random order
            which = torch.rand(batch, size, generator=generator).argsort(-1)[:, : min(queries, size)]
        asked = torch.stack((keys.gather(1, which), values.gather(1, which)), dim=-1).flatten(1)  # q1 a1 q2 a2 …
        pairs = torch.stack((keys, values), dim=-1).flatten(1)
        seq = torch.cat((pairs, torch.full((batch, 1), SEP), asked), dim=1)
        answer = torch.zeros_like(seq[:, 1:], dtype=torch.bool)
        answer[:, 2 * size + 1 :: 2] = True  # the token after each query
        return {"windows": seq, "answer_mask": answer, "depth": which[:, 0].float() / size}
    raise ValueError(f"unknown task '{task}'; valid: {', '.join(TASKS)}")
