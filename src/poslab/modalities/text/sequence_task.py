"""Sequence tasks (copy, reverse, associative recall): accuracy on the answers."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torchmetrics import MeanMetric

from poslab.modalities.text.sequence import DEPTH_BUCKETS
from poslab.modalities.text.sequence_tasks import IGNORE, MULTI_ANSWER
from poslab.modalities.text.task import LanguageModel


def exact_match(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per sequence: 1 when every scored token is predicted right."""
    scored = targets != IGNORE
    right = (logits.argmax(-1) == targets) | ~scored
    return right.all(dim=-1).float()


def token_hits(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``[B, answers]``: each scored token predicted right (1) or not, in sequence order (every
    sequence of a batch scores the same number of tokens)."""
    scored = targets != IGNORE
    return (logits.argmax(-1) == targets)[scored].view(targets.shape[0], -1).float()


class SequenceTask(LanguageModel):
    monitor = ("val/acc", "max")

    def __init__(self, cfg, vocab_size, context, vocab=None) -> None:
        super().__init__(cfg, vocab_size, context, vocab)
        self.val_acc = MeanMetric()
        self.test_acc = MeanMetric()
        #: recall and flip-flop answer each query with one token, each its own answer; copy / reverse answer once
        self.per_token = cfg["data"]["name"] in MULTI_ANSWER

    def answer_hits(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Whether each answer is right: ``[B, queries]`` for recall, ``[B]`` (exact match) otherwise."""
        return token_hits(logits, targets) if self.per_token else exact_match(logits, targets)

    def _eval_step(self, batch, stage: str, metric: MeanMetric) -> None:
        logits = self(batch["tokens"], batch["pos"])
        loss = F.cross_entropy(logits.flatten(0, 1), batch["targets"].flatten(), ignore_index=IGNORE)
        metric.update(loss, weight=(batch["targets"] != IGNORE).sum())  # by scored tokens: a short batch counts less
        accuracy = self.val_acc if stage == "val" else self.test_acc
        accuracy.update(self.answer_hits(logits, batch["targets"]))
        self.log(f"{stage}/loss", metric, on_step=False, on_epoch=True)
        self.log(f"{stage}/acc", accuracy, on_step=False, on_epoch=True, prog_bar=True)

    def _derived(self, stage: str) -> None:
        pass  # bits per character mean nothing here

    def lengen_measure(self, batch, generated: bool, context: int) -> dict:
        """``acc``: per answer, right or not (a recall query's value; a whole copy / reverse output);
        ``token_acc``: per answer token; recall also ``depth_acc``, by depth bucket of the queried pair."""
        from poslab.evaluation.probes import Buckets  # deferred: Lightning, ~6 s

        logits = self.lengen_logits(batch, generated, context)
        hits = self.answer_hits(logits, batch["targets"]).flatten()
        out: dict = {"acc": hits, "token_acc": token_hits(logits, batch["targets"]).flatten()}
        if "depth" in batch:  # one per query, in the order of the answers
            bucket = (batch["depth"].flatten() * DEPTH_BUCKETS).long().clamp(max=DEPTH_BUCKETS - 1)
            out["depth_acc"] = Buckets(hits, bucket, DEPTH_BUCKETS)
        return out

    def evaluations(self, cfg) -> list:
        """The length study, and flip-flop's sparse test where ``eval.sparsity`` asks for it."""
        from poslab.modalities.text.callbacks import SparseFlipFlop  # deferred: Lightning and matplotlib, ~7 s

        sparse = [SparseFlipFlop(cfg.eval)] if cfg.eval.get("sparsity") else []
        return [*super().evaluations(cfg), *sparse]
