"""Image classification: a ViT on patch tokens (the shared :class:`~poslab.tasks.classification.Classifier`)."""

from __future__ import annotations

from typing import Any

from torch import nn

from poslab.config.options import pick_options
from poslab.modalities.vision.callbacks import ResolutionReport
from poslab.modalities.vision.model import ViT
from poslab.tasks.classification import Classifier


class ImageClassifier(Classifier):
    def build_model(self, cfg: dict[str, Any], encoder, num_classes: int, in_chans: int) -> nn.Module:
        options = pick_options(ViT, cfg["model"], ViT.SUPPLIED)
        return ViT(encoder, in_chans=in_chans, num_classes=num_classes, patch_size=cfg["data"]["patch_size"], **options)

    def evaluations(self, cfg) -> list:

        return [*super().evaluations(cfg), ResolutionReport(cfg)]
