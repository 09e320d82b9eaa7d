"""The vision config schema: the keys of ``task`` / ``data`` / ``model`` / ``eval`` and their types.

Values live in ``configs/modality/vision.yaml``; value ranges by dotted key in :data:`RANGES`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional

from omegaconf import MISSING

from poslab.modalities.vision.model import ViT
from poslab.modalities.vision.sources import SOURCES
from poslab.options import options_schema
from poslab.schema import AT_LEAST_0, AT_LEAST_1, FRACTION, EvalConfig, ModelConfig

RANGES = {
    "data.val_size": AT_LEAST_1,
    "data.test_size": AT_LEAST_1,
    "data.image_size": AT_LEAST_1,
    "data.patch_size": AT_LEAST_1,
    "data.augment.rotate": AT_LEAST_0,
    "data.augment.scale": FRACTION,
    "data.augment.translate": FRACTION,
    "eval.image_sizes": AT_LEAST_1,
    "task.label_smoothing": FRACTION,
}


@dataclass
class VisionEvalConfig(EvalConfig):
    """End-of-run resolution probe: test accuracy at these image sizes, raw and rescaled coordinates."""

    image_sizes: list[int] = MISSING


@dataclass
class AugmentConfig:
    """Random affine per image (train only): rotation °, scale ±, shift as image fraction."""

    enabled: bool = MISSING
    rotate: float = MISSING
    scale: float = MISSING
    translate: float = MISSING


@dataclass
class VisionDataConfig:
    name: Literal[tuple(SOURCES)] = MISSING  # type: ignore[valid-type]
    root: str = MISSING
    image_size: Optional[int] = MISSING
    patch_size: int = MISSING
    coords: Literal["raw", "rescaled"] = MISSING
    batch_size: int = MISSING
    eval_batch_size: int = MISSING
    num_workers: int = MISSING
    val_size: int = MISSING
    test_size: int = MISSING
    split_seed: int = MISSING
    download: bool = MISSING
    quadrant: bool = MISSING  # the quadrant task: digit in one quadrant of a 2x canvas, label = quadrant
    augment: AugmentConfig = field(default_factory=AugmentConfig)


#: ``model.*``: the ViT's keyword options, typed and defaulted by its constructor.
ViTConfig = options_schema("ViTConfig", ViT, ViT.SUPPLIED, bases=(ModelConfig,))


@dataclass
class ClassificationTaskConfig:
    name: Literal["classification"] = MISSING
    label_smoothing: float = MISSING
