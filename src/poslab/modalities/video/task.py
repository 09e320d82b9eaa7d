"""Video classification (direction of motion or digit): the shared classifier with a space-time ViT."""

from __future__ import annotations

from typing import Any

from torch import nn

from poslab.config.options import pick_options
from poslab.modalities.video.callbacks import ExtrapolationProbe
from poslab.modalities.video.model import VideoViT
from poslab.modalities.vision.model import ViT
from poslab.tasks.classification import Classifier


class VideoClassifier(Classifier):
    input_key = "video"

    def build_model(self, cfg: dict[str, Any], encoder, num_classes: int, in_chans: int) -> nn.Module:
        data = cfg["data"]
        return VideoViT(
            encoder,
            in_chans=in_chans,
            num_classes=num_classes,
            patch_size=data["patch_size"],
            tubelet=data["tubelet"],
            **pick_options(ViT, cfg["model"], ViT.SUPPLIED),
        )

    def evaluations(self, cfg) -> list:

        return [*super().evaluations(cfg), ExtrapolationProbe(cfg)]
