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
* ``flip_flop``: Flip-Flop language modelling (Liu et al. 2023, "Exposing
  Attention Glitches with Flip-Flop Language Modeling"): instructions ``w b``
  (write bit b), ``i b`` (ignore), ``r b`` (read: b is the last bit written),
  starting with a write; only the bit after each ``r`` is scored. Each
  sequence holds Q = ``data.queries`` reads, the last instruction among them;
  the others are writes with probability 1/9 and ignores otherwise (the
  paper's FFL(0.8): reads and writes 0.1 each, ignores 0.8). Two tests, kept
  apart: m× the length with writes as frequent as in training (the length
  study), and the training length with writes s times rarer (``sparsity``;
  s = 11 is the paper's FFL(0.98)), so the last write lies further back than
  training put it without any unseen length: the paper's sparse
  out-of-distribution test, where CoPE (Golovneva et al. 2024) keeps its
  accuracy and RoPE and absolute positions lose it.

Sizes: ``data.context`` is the training sequence budget; copy / reverse use
n = context // 2 symbols, flip-flop context // 2 instructions; recall with Q = ``data.queries`` holds
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
TASKS = ("copy", "reverse", "associative_recall", "flip_flop")
#: Tasks that answer several times per sequence, each answer scored on its own (``data.queries`` of them).
MULTI_ANSWER = ("associative_recall", "flip_flop")
#: Flip-Flop's tokens (after PAD and SEP): the three instructions, then the two bits.
WRITE, IGNORE_OP, READ, ZERO, ONE = range(FIRST_SYMBOL, FIRST_SYMBOL + 5)
#: FFL(0.8): among the instructions that are not reads, the share of writes (0.1 / (0.1 + 0.8)).
WRITE_SHARE = 1 / 9


def task_size(task: str, context: int, queries: int = 1) -> int:
    """Symbols (copy / reverse) or pairs (recall, asked ``queries`` times) that fit ``context`` tokens."""
    if task == "associative_recall":
        return max(1, (context - 2) // 2 - (queries - 1))
    if task == "flip_flop":
        return max(queries + 1, context // 2)
    return max(1, context // 2)


def vocab_size(symbols: int) -> int:
    return FIRST_SYMBOL + max(2 * symbols, 5)  # recall uses disjoint key and value alphabets; flip-flop 5 tokens


def generate(
    task: str,
    size: int,
    batch: int,
    symbols: int,
    generator: torch.Generator,
    depth: torch.Tensor | None = None,
    queries: int = 1,
    sparsity: float = 1.0,
) -> dict[str, torch.Tensor]:
    """``{"windows": [B, T + 1], "answer_mask": [B, T]}`` for one length.

    Recall: ``queries`` distinct pairs are queried one after another
    (``… SEP q1 a1 q2 a2 …``), every answer scored (``depth``: ``[B, Q]``);
    ``depth`` in [0, 1) given (evaluation) places the first query at that depth,
    the others at random distinct pairs. Flip-flop: ``size`` instructions, ``queries`` of them reads,
    writes ``sparsity`` times rarer than in training.
    """
    if task == "flip_flop":
        return flip_flop(max(size, queries + 1), batch, queries, generator, sparsity)
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


def flip_flop(size: int, batch: int, reads: int, generator: torch.Generator, sparsity: float = 1.0) -> dict:
    """``size`` instructions (2 tokens each): a write first, ``reads`` reads (the last instruction one of
    them), writes with probability ``WRITE_SHARE / sparsity`` among the rest, ignores otherwise."""
    order = torch.rand(batch, size - 2, generator=generator).argsort(-1)[:, : reads - 1] + 1  # reads among 1 … n−2
    is_read = torch.zeros(batch, size, dtype=torch.bool)
    is_read.scatter_(1, order, True)
    is_read[:, -1] = True
    is_write = (torch.rand(batch, size, generator=generator) < WRITE_SHARE / sparsity) & ~is_read
    is_write[:, 0] = True
    bits = torch.randint(0, 2, (batch, size), generator=generator)
    # a read repeats the bit of the latest write before it: carry the written bit forward
    index = torch.where(is_write, torch.arange(size), 0).cummax(dim=1).values
    bits = torch.where(is_read, bits.gather(1, index), bits)
    ops = torch.where(is_write, WRITE, torch.where(is_read, READ, IGNORE_OP))
    seq = torch.stack((ops, bits + ZERO), dim=-1).flatten(1)  # op b op b …
    answer = torch.zeros(batch, 2 * size - 1, dtype=torch.bool)
    answer[:, 0::2] = is_read  # predicting the token after each op: the read's bit
    return {"windows": seq, "answer_mask": answer}
