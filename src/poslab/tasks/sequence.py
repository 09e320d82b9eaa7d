"""Sequence tasks (copy, reverse, associative recall): exact-match accuracy on the answer."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torchmetrics import MeanMetric

from poslab.data.sequence import DEPTH_BUCKETS
from poslab.data.sequence_tasks import IGNORE
from poslab.tasks.language_model import LanguageModel


def exact_match(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per sequence: 1 when every scored token is predicted right."""
    scored = targets != IGNORE
    right = (logits.argmax(-1) == targets) | ~scored
    return right.all(dim=-1).float()


class SequenceTask(LanguageModel):
    monitor = ("val/acc", "max")

    def __init__(self, cfg, vocab_size, context, vocab=None) -> None:
        super().__init__(cfg, vocab_size, context, vocab)
        self.val_acc = MeanMetric()
        self.test_acc = MeanMetric()

    def _eval_step(self, batch, stage: str, metric: MeanMetric) -> None:
        logits = self(batch["tokens"], batch["pos"])
        loss = F.cross_entropy(logits.flatten(0, 1), batch["targets"].flatten(), ignore_index=IGNORE)
        metric.update(loss)
        accuracy = self.val_acc if stage == "val" else self.test_acc
        accuracy.update(exact_match(logits, batch["targets"]))
        self.log(f"{stage}/loss", metric, on_step=False, on_epoch=True)
        self.log(f"{stage}/acc", accuracy, on_step=False, on_epoch=True, prog_bar=True)

    def _derived(self, stage: str) -> None:
        pass  # bits per character mean nothing here

    @torch.no_grad()
    def lengen_metrics(self, loader) -> dict:
        """Exact-match accuracy; for recall also accuracy per depth bucket (10, start to end)."""
        was_training = self.training
        self.eval()
        hits, depths = [], []
        datamodule = self.trainer.datamodule
        for item in loader:
            batch = datamodule.as_batch({k: v.to(self.device) for k, v in item.items()})
            hits.append(exact_match(self(batch["tokens"], batch["pos"]), batch["targets"]).cpu())
            if "depth" in batch:
                depths.append(batch["depth"].cpu())
        self.train(was_training)
        hits_all = torch.cat(hits)
        out: dict = {"acc": hits_all.mean().item()}
        if depths:
            bucket = (torch.cat(depths) * DEPTH_BUCKETS).long().clamp(max=DEPTH_BUCKETS - 1)
            out["depth_acc"] = [
                hits_all[bucket == b].mean().item() if (bucket == b).any() else None for b in range(DEPTH_BUCKETS)
            ]
        return out
