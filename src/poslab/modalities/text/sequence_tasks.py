"""Synthetic sequence tasks for length generalisation, generated and seeded.

Every sequence is ``<prompt> SEP <answer>`` for a decoder-only model; only the
answer tokens are scored (other targets are ``IGNORE``). Training draws one
length per batch, uniform up to the training size, so no padding is needed;
evaluation uses fixed seeded sets at exactly ``multiple`` × the training size.

* ``copy``: n symbols, then the same n symbols.
* ``reverse``: n symbols, then them reversed.
* ``associative_recall``: K distinct key → value pairs ``k1 v1 … kK vK``, SEP,
  then Q of the keys, each followed by its value (the answers): multi-query
  associative recall after Zoology's MQAR (Arora et al. 2023), with three
  differences — Q of the K keys are asked (MQAR asks every key), values are
  drawn with replacement (MQAR's are distinct), and every query comes after
  all the pairs (MQAR spaces them with power-law gaps). A queried pair's
  index / K is its *depth* (0 = the start of the context); evaluation controls
  the first query's depth, spread evenly over the depth buckets, to draw the
  "lost in the middle" curve (Liu et al. 2023).

Sizes: ``data.context`` is the training sequence budget; copy / reverse use
n = context // 2 symbols; recall with Q = ``data.queries`` holds
K = (context − 2) // 2 − (Q − 1) pairs, so the Q queries fit the budget.
Training draws 1 … K pairs; evaluation at 1× holds exactly K pairs and asks Q
queries like training (in distribution), and at m× it fills m × the budget the
same way.
"""

from __future__ import annotations

import torch

PAD, SEP = 0, 1
FIRST_SYMBOL = 2
IGNORE = -100
TASKS = ("copy", "reverse", "associative_recall")


def task_size(task: str, context: int, queries: int = 1) -> int:
    """Symbols (copy / reverse) or pairs (recall, asked ``queries`` times) that fit ``context`` tokens."""
    if task == "associative_recall":
        return max(1, (context - 2) // 2 - (queries - 1))
    return max(1, context // 2)


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

    Recall: ``queries`` distinct pairs are queried one after another
    (``… SEP q1 a1 q2 a2 …``), every answer scored (``depth``: ``[B, Q]``);
    ``depth`` in [0, 1) given (evaluation) places the first query at that depth,
    the others at random distinct pairs.
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
        if depth is None and queries == 1:
            which = torch.randint(0, size, (batch, 1), generator=generator)
        else:  # distinct pairs, in random order; with `depth`, the first one at that depth
            order = torch.rand(batch, size, generator=generator)
            if depth is not None:
                order.scatter_(1, (depth * size).long().clamp(max=size - 1)[:, None], -1.0)
            which = order.argsort(-1)[:, : min(queries, size)]
        asked = torch.stack((keys.gather(1, which), values.gather(1, which)), dim=-1).flatten(1)  # q1 a1 q2 a2 …
        pairs = torch.stack((keys, values), dim=-1).flatten(1)
        seq = torch.cat((pairs, torch.full((batch, 1), SEP), asked), dim=1)
        answer = torch.zeros_like(seq[:, 1:], dtype=torch.bool)
        answer[:, 2 * size + 1 :: 2] = True  # the token after each query
        return {"windows": seq, "answer_mask": answer, "depth": which.float() / size}
    raise ValueError(f"unknown task '{task}'; valid: {', '.join(TASKS)}")
