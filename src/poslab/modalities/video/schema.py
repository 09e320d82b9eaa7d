"""The video config schema: every ``task`` / ``data`` / ``eval`` option with its type and default.

An option is declared once, here (``model.*``: in the ViT's constructor);
``configs/modality/video.yaml`` and experiments set other values, and
validation and ``poslab train --options`` derive from these declarations.
Each range is declared at its field (``Annotated[int, AT_LEAST_1]``, :mod:`poslab.config.ranges`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal, Optional

from poslab.config.options import options_schema
from poslab.config.ranges import AT_LEAST_0, AT_LEAST_1, FRACTION, POSITIVE, SEED
from poslab.config.schema import EvalConfig, ModelConfig
from poslab.modalities.video.sources import SOURCES
from poslab.modalities.vision.model import ViT


@dataclass
class VideoDataConfig:
    # moving_mnist: one embedded MNIST digit moving on a blank canvas (no network); videofolder: data.path's
    # class folders of videos or of frame folders; ucf101: UCF101, downloaded (data.fold: its official split)
    name: Literal[tuple(SOURCES)] = "moving_mnist"  # type: ignore[valid-type]
    root: str = "data"  # download / cache folder
    path: Optional[str] = None  # data=videofolder: the folder of class subfolders (train/ and val/, or the classes)
    fold: Annotated[int, AT_LEAST_1] = 1  # data=ucf101: official split 1, 2 or 3
    download: bool = True
    skip_unreadable: bool = False  # a video that cannot be decoded, or is shorter than a clip: skipped, counted
    label: Literal["direction", "digit"] = "direction"  # moving_mnist: 8 classes, the start direction | 10: the digit
    frames: Annotated[int, AT_LEAST_1] = 8  # frames per clip
    frame_stride: Annotated[int, AT_LEAST_1] = 1  # a video's clip: every k-th frame (moving_mnist: 1)
    canvas: Annotated[int, AT_LEAST_1] = 32  # px, square (a video's clip: cropped to it)
    augment: bool = True  # a video's training clips: a random resized crop and a left-right flip
    digit_size: Annotated[int, AT_LEAST_1] = 16  # moving_mnist: px, the 28 px digits are resized
    speed: Annotated[float, POSITIVE] = (
        8.0  # moving_mnist: px per frame along each axis it moves on (= the patch size); it bounces off the walls
    )
    patch_size: Annotated[int, AT_LEAST_1] = 8
    tubelet: Annotated[int, AT_LEAST_1] = (
        1  # frames per token: 1 = patches of one frame (a larger tubelet sees motion without positions)
    )
    coords: Literal["raw", "rescaled"] = "rescaled"  # other clip sizes: rescaled to the training range | raw
    train_clips: Annotated[int, AT_LEAST_1] = (
        6000  # moving_mnist: training clips from 4,000 training digits (some twice, with another motion)
    )
    val_size: Annotated[int, AT_LEAST_1] = 500  # held out of the training digits (videos)
    test_size: Annotated[int, AT_LEAST_1] = 500  # held out too, where the data has no test split
    split_seed: Annotated[int, SEED] = 0
    batch_size: Annotated[int, AT_LEAST_1] = 64
    eval_batch_size: Annotated[int, AT_LEAST_1] = 250
    num_workers: Annotated[int, AT_LEAST_0] = 0  # videos are decoded in workers (their default: the cores, <= 8)
    # HoPE's dynamic temporal scaling (Li et al. 2025): in training, each batch's frame indices (coords3d's
    # t) times one scale drawn from these ([0.5, 0.75, 1.0, 1.25, 1.5] in the paper); []: none
    temporal_scales: Annotated[list[float], POSITIVE] = field(default_factory=list)


#: ``model.*``: the ViT's keyword options (the space-time ViT adds only the data's ``tubelet``).
VideoModelConfig = options_schema("VideoModelConfig", ViT, ViT.SUPPLIED, bases=(ModelConfig,))


@dataclass
class VideoTaskConfig:
    name: Literal["classification"] = "classification"
    label_smoothing: Annotated[float, FRACTION] = 0.0  # training loss only


@dataclass
class VideoEvalConfig(EvalConfig):
    """End-of-run probes: accuracy on longer clips (temporal) and larger canvases (spatial), raw and rescaled."""

    frames: Annotated[list[int], AT_LEAST_1] = field(default_factory=list)  # e.g. [16]
    canvases: Annotated[list[int], AT_LEAST_1] = field(default_factory=list)  # e.g. [64]


def check_video(cfg) -> Optional[str]:
    """Clips must cut into whole tokens: frames into tubelets, the canvas into patches."""
    data = cfg.data
    for frames in [data.frames, *cfg.eval.frames]:
        if frames % data.tubelet:
            return f"{frames} frames do not split into tubelets of data.tubelet={data.tubelet}"
    for canvas in [data.canvas, *cfg.eval.canvases]:
        if canvas % data.patch_size:
            return f"a canvas of {canvas} px is not a multiple of data.patch_size={data.patch_size}"
        if data.name == "moving_mnist" and canvas - data.digit_size < data.speed:
            return (
                f"a digit of {data.digit_size} px moving {data.speed:g} px a frame needs a canvas of at least "
                f"{data.digit_size + data.speed:g} px, got {canvas}"
            )
    return None
