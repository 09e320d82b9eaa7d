"""The video config schema: the keys of ``task`` / ``data`` / ``model`` / ``eval`` and their types.

Values live in ``configs/modality/video.yaml``; value ranges by dotted key in :data:`RANGES`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

from omegaconf import MISSING

from poslab.modalities.vision.model import ViT
from poslab.options import options_schema
from poslab.schema import AT_LEAST_1, FRACTION, POSITIVE, EvalConfig, ModelConfig, Range

RANGES = {
    "data.frames": AT_LEAST_1,
    "data.canvas": AT_LEAST_1,
    "data.digit_size": AT_LEAST_1,
    "data.patch_size": AT_LEAST_1,
    "data.tubelet": AT_LEAST_1,
    "data.speed": POSITIVE,
    "data.train_clips": AT_LEAST_1,
    "data.val_size": AT_LEAST_1,
    "data.test_size": AT_LEAST_1,
    "task.label_smoothing": FRACTION,
    "eval.frames": AT_LEAST_1,
    "eval.canvases": Range(1),
}


@dataclass
class VideoDataConfig:
    name: Literal["moving_mnist"] = MISSING
    root: str = MISSING
    label: Literal["direction", "digit"] = MISSING
    frames: int = MISSING
    canvas: int = MISSING
    digit_size: int = MISSING
    speed: float = MISSING
    patch_size: int = MISSING
    tubelet: int = MISSING
    coords: Literal["raw", "rescaled"] = MISSING
    train_clips: int = MISSING
    val_size: int = MISSING
    test_size: int = MISSING
    split_seed: int = MISSING
    batch_size: int = MISSING
    eval_batch_size: int = MISSING
    num_workers: int = MISSING


#: ``model.*``: the ViT's keyword options (the space-time ViT adds only the data's ``tubelet``).
VideoModelConfig = options_schema("VideoModelConfig", ViT, ViT.SUPPLIED, bases=(ModelConfig,))


@dataclass
class VideoTaskConfig:
    name: Literal["classification"] = MISSING
    label_smoothing: float = MISSING


@dataclass
class VideoEvalConfig(EvalConfig):
    """End-of-run probes: accuracy on longer clips (temporal) and larger canvases (spatial), raw and rescaled."""

    frames: list[int] = MISSING
    canvases: list[int] = MISSING


def check_video(cfg) -> Optional[str]:
    """Clips must cut into whole tokens: frames into tubelets, the canvas into patches."""
    data = cfg.data
    for frames in [data.frames, *cfg.eval.frames]:
        if frames % data.tubelet:
            return f"{frames} frames do not split into tubelets of data.tubelet={data.tubelet}"
    for canvas in [data.canvas, *cfg.eval.canvases]:
        if canvas % data.patch_size:
            return f"a canvas of {canvas} px is not a multiple of data.patch_size={data.patch_size}"
        if canvas - data.digit_size < data.speed:
            return (
                f"a digit of {data.digit_size} px moving {data.speed:g} px a frame needs a canvas of at least "
                f"{data.digit_size + data.speed:g} px, got {canvas}"
            )
    return None
