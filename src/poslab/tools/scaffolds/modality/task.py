"""The toy task: cross-entropy on the order label, loss and accuracy logged per split."""

from __future__ import annotations

from functools import partialmethod

import torchmetrics
from torch import nn

from poslab.config.options import pick_options
from poslab.tasks.base import PositionTask

from .model import ToyNet


class ToyTaskModule(PositionTask):
    monitor = ("val/acc", "max")  # the metric best.ckpt (and early stopping) follow

    def __init__(self, cfg, vocab: int, num_classes: int, context) -> None:
        super().__init__(cfg)
        self.save_hyperparameters()
        options = pick_options(ToyNet, cfg["model"], ToyNet.SUPPLIED)
        self.model = ToyNet(self.build_encoder(context), vocab=vocab, num_classes=num_classes, **options)
        accuracy = {stage: torchmetrics.Accuracy("multiclass", num_classes=num_classes) for stage in ("val", "test")}
        self.accuracy = nn.ModuleDict(accuracy)

    def _step(self, batch, stage: str):
        logits = self.model(batch["tokens"], batch["pos"])
        loss = nn.functional.cross_entropy(logits, batch["label"])
        size = len(batch["label"])
        self.log(f"{stage}/loss", loss, on_step=stage == "train", on_epoch=stage != "train", batch_size=size)
        if stage != "train":
            self.accuracy[stage](logits, batch["label"])
            self.log(f"{stage}/acc", self.accuracy[stage], on_epoch=True, batch_size=size)
        return loss

    def training_step(self, batch, batch_idx: int):
        return self._step(batch, "train")

    def _evaluation_step(self, batch, batch_idx: int, stage: str) -> None:
        self._step(batch, stage)

    # Lightning's evaluation hooks, one helper bound to each stage
    validation_step = partialmethod(_evaluation_step, stage="val")
    test_step = partialmethod(_evaluation_step, stage="test")
