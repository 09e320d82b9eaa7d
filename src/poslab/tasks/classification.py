"""Classification shared by modalities: cross-entropy, torchmetrics accuracy per stage, accuracy per class.

A modality's classifier subclasses :class:`Classifier`, builds its model in
:meth:`~Classifier.build_model` and names the batch key of its inputs.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torchmetrics.classification import MulticlassAccuracy

from poslab.evaluation.probes import Evaluation
from poslab.tasks.base import PositionTask
from poslab.track import plots


class Classifier(PositionTask):
    """``cfg`` is the resolved config as plain containers (checkpoint-safe); the data module's
    ``model_facts()`` give ``num_classes`` and ``in_chans``."""

    monitor = ("val/acc", "max")
    input_key = "image"  # the batch key the model reads

    def __init__(self, cfg: dict[str, Any], num_classes: int, in_chans: int, context: dict[str, Any]) -> None:
        super().__init__(cfg)
        self.save_hyperparameters()
        self.model = self.build_model(cfg, self.build_encoder(context), num_classes, in_chans)
        self.label_smoothing = cfg["task"]["label_smoothing"]
        # One metric object per stage: their states must never mix.
        # average="micro": plain accuracy (torchmetrics defaults to the macro average).
        self.train_acc = MulticlassAccuracy(num_classes, average="micro")
        self.val_acc = MulticlassAccuracy(num_classes, average="micro")
        self.test_acc = MulticlassAccuracy(num_classes, average="micro")
        self.test_class_acc = MulticlassAccuracy(num_classes, average=None)
        self.per_class_accuracy: list[float] | None = None

    def build_model(self, cfg: dict[str, Any], encoder, num_classes: int, in_chans: int) -> torch.nn.Module:
        """The network: ``model(inputs, pos) -> logits``; its ``.backbone`` owns the encoder."""
        raise NotImplementedError

    def forward(self, images, pos):
        return self.model(images, pos)

    def _step(self, batch, stage: str, metric: MulticlassAccuracy):
        logits = self(batch[self.input_key], batch["pos"])
        smoothing = self.label_smoothing if stage == "train" else 0.0
        target = batch["label"]  # class indices, or a distribution over classes (Mixup / CutMix in training)
        loss = F.cross_entropy(logits, target, label_smoothing=smoothing)
        metric(logits, target.argmax(-1) if target.is_floating_point() else target)
        size = batch["label"].shape[0]
        training = stage == "train"  # evaluation losses are averaged over DDP ranks (the metrics sync themselves)
        # train/loss per step (as in every modality), evaluation losses per epoch
        self.log(
            f"{stage}/loss", loss, on_step=training, on_epoch=not training, prog_bar=not training, batch_size=size,
            sync_dist=not training,
        )  # fmt: skip
        self.log(f"{stage}/acc", metric, on_step=False, on_epoch=True, prog_bar=stage == "val", batch_size=size)
        return loss, logits

    def training_step(self, batch, batch_idx):
        return self._step(batch, "train", self.train_acc)[0]

    def validation_step(self, batch, batch_idx):
        self._step(batch, "val", self.val_acc)

    def test_step(self, batch, batch_idx):
        _, logits = self._step(batch, "test", self.test_acc)
        self.test_class_acc.update(logits, batch["label"])

    def on_test_epoch_end(self) -> None:
        self.per_class_accuracy = self.test_class_acc.compute().tolist()
        self.test_class_acc.reset()

    def answer_hits(self, batch) -> dict[str, torch.Tensor]:
        """A probe's measure (:class:`poslab.evaluation.probes.Probe`): 1 per image classified right, else 0."""
        logits = self(batch[self.input_key], batch["pos"])
        return {"acc": (logits.argmax(-1) == batch["label"]).float()}

    def evaluations(self, cfg) -> list:
        return [PerClassAccuracy()]


class PerClassAccuracy(Evaluation):
    """After testing: accuracy per class (the test pass's own metric) as a table and a bar chart."""

    def summarize(self, trainer, task, results) -> None:
        values = task.per_class_accuracy
        if values is None:
            return
        names = list(trainer.datamodule.class_names)
        rows = [[n, float(v)] for n, v in zip(names, values, strict=True)]
        self.add_table(trainer, "test/acc_per_class", ["class", "acc"], rows)
        self.add_figure(
            trainer,
            "test/acc_per_class",
            plots.per_class_figure(names, values, f"test accuracy per class ({task.encoder.name})"),
        )
