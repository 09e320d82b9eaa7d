"""Length generalisation: metrics at 1×, 2×, 4×, 8× the training context.

Protocol of the ALiBi paper (Press et al. 2022, §4): the same held-out text is
cut into non-overlapping windows of each length and the loss is averaged over
every predicted token. For encoders with context extensions (RoPE: linear,
ntk, dynamic, yarn) the curve is repeated with each extension applied at
evaluation time, without retraining: with factor = the length multiple, except
for an extension driven by the length itself (dynamic NTK), which keeps factor
1 — its scale grows as max(1, l′/L) with the length l′ it processes (YaRN
§3.3; Hugging Face's ``_compute_dynamic_ntk_parameters``) — and is scored as it
runs in generation (:func:`as_generated`): scoring a whole window at once would
scale every prediction for the window's length, i.e. make it NTK at factor m.
A searched extension (LongRoPE's per-frequency factors, LongRoPE2's) is first fitted at
each length on validation data of that length, scored as its search says: the loss of
every token, or of a needle's (:func:`searched_extension`); then it is scored on the
test windows like the others. An encoder that cannot run at a
length (a learned table) records why.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from poslab import interrupts
from poslab.encoders.base import PositionEncoder
from poslab.encoders.longrope_search import SearchBudget, SearchResult
from poslab.positions import Positions, steps_start

BASE = "base"
#: Each prefix of :func:`as_generated` is at most this much longer than the last: every prediction is
#: scaled for a length at most 12.5 % past its own.
PREFIX_GROWTH = 1.125


def prefix_ends(length: int, context: int, growth: float = PREFIX_GROWTH) -> list[int]:
    """Ends of the prefixes that :func:`as_generated` runs: the training context, then ``growth`` longer each."""
    ends = [min(context, length)]
    while ends[-1] < length:
        ends.append(min(length, max(ends[-1] + 1, math.floor(ends[-1] * growth))))
    return ends


def as_generated(
    forward: Callable[[torch.Tensor, Positions], torch.Tensor], tokens: torch.Tensor, pos, context: int
) -> torch.Tensor:
    """Logits ``[B, L, …]`` as generation computes them: those of position t from a pass over a prefix
    that ends at t + 1 or at most 12.5 % past it, with that prefix's own positions — so a length-driven
    extension scales each prediction for (about) its own length. Positions that are not consecutive
    steps from 0 are scored in one pass."""
    if not isinstance(pos, Positions) or steps_start(pos) != 0:
        return forward(tokens, pos)
    pieces, done = [], 0
    for end in prefix_ends(tokens.shape[1], context):
        logits = forward(tokens[:, :end], Positions.consecutive(end, device=tokens.device))
        pieces.append(logits[:, done:end])
        done = end
    return torch.cat(pieces, dim=1)


@contextmanager
def encoder_swapped(backbone: nn.Module, encoder: PositionEncoder) -> Iterator[None]:
    """Run the backbone with another encoder (an extended copy), then restore it."""
    original = backbone.encoder
    backbone.encoder = encoder
    try:
        yield
    finally:
        backbone.encoder = original


def answer_losses(losses: torch.Tensor, answer: torch.Tensor) -> torch.Tensor:
    """The losses ``[B, L]`` of each row's last ``answer[b]`` targets (a needle prompt's needle), flat."""
    length = losses.shape[1]
    return losses[torch.arange(length, device=losses.device)[None] >= length - answer[:, None]]


def searched_extension(
    trainer, task, kind: str, factor: float, multiple: int, budget: SearchBudget, tokens: int, objective: str = "own"
) -> tuple[PositionEncoder, SearchResult]:
    """The task encoder's searched extension ``kind`` at ``multiple`` × the context, its settings fitted on about
    ``tokens`` validation tokens of that length (the model in eval mode, under the run's precision), scored by
    the objective the search names: ``loss``, the mean loss of validation windows; ``needle``, the loss of the
    needle tokens of needle prompts (:mod:`poslab.modalities.text.needle`). Every rank searches the same data
    from the same seed and takes rank 0's loss for each candidate, so every rank takes the same path and finds
    the same settings (a GPU's last bits may differ). ``objective`` other than ``own`` scores every search by it."""
    from lightning.fabric.utilities.apply_func import move_data_to_device  # deferred: Lightning, ~7 s

    datamodule = trainer.datamodule
    batches: dict[str, list] = {}

    def data(objective: str) -> list:
        if objective not in batches:
            if objective == "needle":
                loader = datamodule.needle_loader(multiple, tokens)
                batches[objective] = [
                    {**datamodule.as_batch(move_data_to_device(ids, task.device)), "answer": answer.to(task.device)}
                    for ids, answer in loader
                ]
            else:
                loader = datamodule.search_loader(multiple, tokens)
                batches[objective] = [datamodule.as_batch(move_data_to_device(item, task.device)) for item in loader]
        return batches[objective]

    def scored(batch: dict, objective: str) -> torch.Tensor:
        losses = task.lengen_measure(batch, False, datamodule.context)["loss"]
        return answer_losses(losses.view(batch["targets"].shape), batch["answer"]) if objective == "needle" else losses

    forced = None if objective == "own" else objective

    def fitness(candidate: PositionEncoder, objective: str = "loss") -> float:
        objective = forced or objective
        interrupts.check("the search of a context extension")
        with encoder_swapped(task.backbone, candidate), trainer.precision_plugin.forward_context():
            losses = [scored(batch, objective) for batch in data(objective)]
        return float(trainer.strategy.broadcast(torch.cat(losses).float().mean().item(), src=0))

    training = task.training
    task.eval()
    try:
        with torch.no_grad():
            return task.encoder.search_extension(kind, factor, fitness, budget)
    finally:
        task.train(training)


@dataclass(frozen=True)
class LengthPass:
    """One pass of the length study: the trained encoder (``factor`` None) or an extension of it."""

    variant: str  # BASE, or the extension's name
    multiple: int
    factor: float | None
    generated: bool  # scored as in generation (:func:`as_generated`)


def length_passes(encoder: PositionEncoder, multiples: Sequence[int], extensions: Sequence[str]) -> list[LengthPass]:
    """The passes for the trained encoder and each of its ``extensions`` at every multiple. At 1x an
    extension is the trained model itself (factor 1, or a length within the training context): no pass,
    its row is the base's."""
    usable = usable_extensions(encoder, extensions)
    passes = []
    for multiple in multiples:
        passes.append(LengthPass(BASE, multiple, None, False))
        for kind in usable if multiple != 1 else ():
            driven = kind in encoder.length_driven_extensions
            passes.append(LengthPass(kind, multiple, 1.0 if driven else float(multiple), driven))
    return passes


def usable_extensions(encoder: PositionEncoder, extensions: Sequence[str]) -> list[str]:
    return [e for e in extensions if e in encoder.context_extensions]
