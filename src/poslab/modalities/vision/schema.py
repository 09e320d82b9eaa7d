"""The vision config schema: every ``task`` / ``data`` / ``eval`` option with its type and default.

An option is declared once, here (``model.*``: in the ViT's constructor);
``configs/modality/vision.yaml`` and experiments set other values, and
validation and ``poslab train --options`` derive from these declarations.
Each range is declared at its field (``Annotated[int, AT_LEAST_1]``, :mod:`poslab.config.ranges`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal, Optional

from poslab.config.options import options_schema
from poslab.config.ranges import AT_LEAST_0, AT_LEAST_1, FRACTION, SEED, ZeroToOne
from poslab.config.schema import EvalConfig, ModelConfig
from poslab.modalities.vision.model import ViT
from poslab.modalities.vision.sources import SOURCES


@dataclass
class VisionEvalConfig(EvalConfig):
    """End-of-run resolution probe: test accuracy at these image sizes, raw and rescaled coordinates."""

    image_sizes: Annotated[list[int], AT_LEAST_1] = field(default_factory=list)  # e.g. [56]


@dataclass
class AugmentConfig:
    """Random affine per training image (in memory; a folder's are cropped at random as they are decoded), and
    DeiT's augmentations (Touvron et al. 2021, Table 9: RandAugment m9 n2, erasing 0.25, Mixup 0.8, CutMix 1.0)."""

    enabled: bool = True
    rotate: Annotated[float, AT_LEAST_0] = 10.0  # degrees
    scale: Annotated[float, FRACTION] = 0.1  # +-10 %
    translate: Annotated[float, FRACTION] = 0.1  # fraction of the image
    randaugment: bool = False  # a folder's images: RandAugment (2 ops, magnitude 9) as they are decoded
    erasing: ZeroToOne = 0.0  # probability of erasing a random box with noise, per image
    mixup: Annotated[float, AT_LEAST_0] = 0.0  # Mixup's alpha (0: off); with cutmix, one of the two per batch
    cutmix: Annotated[float, AT_LEAST_0] = 0.0  # CutMix's alpha (0: off)


@dataclass
class VisionDataConfig:
    name: Literal[tuple(SOURCES)] = "mnist5k"  # type: ignore[valid-type]  # mnist5k is embedded: no network
    root: str = "data"  # download / cache folder
    path: Optional[str] = None  # data=imagefolder: the folder of class subfolders (train/ and val/, or the classes)
    skip_unreadable: bool = False  # a folder's unreadable image: skipped with a counted warning (false: one error)
    image_size: Annotated[Optional[int], AT_LEAST_1] = (
        None  # None: the dataset's own size (28 for MNIST, 32 for CIFAR-10)
    )
    patch_size: Annotated[int, AT_LEAST_1] = 7
    coords: Literal["raw", "rescaled"] = "rescaled"  # at another image size: rescaled to the training grid | raw
    batch_size: Annotated[int, AT_LEAST_1] = 128
    eval_batch_size: Annotated[int, AT_LEAST_1] = 500
    num_workers: Annotated[int, AT_LEAST_0] = 0  # data is in memory; workers only add start-up time on a CPU
    val_size: Annotated[int, AT_LEAST_1] = 500  # held out of the training images
    test_size: Annotated[int, AT_LEAST_1] = 500  # mnist5k only: the other datasets have an official test split
    split_seed: Annotated[int, SEED] = 0  # fixed, so every run sees the same split
    download: bool = True
    quadrant: bool = False  # the quadrant task: digit in one quadrant of a 2x canvas, label = quadrant
    augment: AugmentConfig = field(default_factory=AugmentConfig)


#: ``model.*``: the ViT's keyword options, typed and defaulted by its constructor.
ViTConfig = options_schema("ViTConfig", ViT, ViT.SUPPLIED, bases=(ModelConfig,))


@dataclass
class ClassificationTaskConfig:
    name: Literal["classification"] = "classification"
    label_smoothing: Annotated[float, FRACTION] = 0.1  # training loss only
