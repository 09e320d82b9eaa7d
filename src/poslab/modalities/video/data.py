"""Video clips with space-time patch positions: moving digits made on the fly, or videos decoded from files.

A token is a patch of one frame by default (``data.tubelet`` frames when
larger: a tubelet would let the patch embedding see motion without any
position). Tokens are listed frame-major, then row-major. Each carries its
frame index (``steps``), its (row, col) cell (``coords``) and both together
(``coords3d``), so 1D encoders see time, 2D encoders space, 3D encoders both.

``train_data`` (evaluation on other clips) fixes the training grid: with
``coords=rescaled`` a longer clip or a larger canvas is mapped onto the
training range (the frame index too, in ``coords3d``); with ``raw`` positions
run past it. ``steps`` stay raw frame indices either way.

Batches leave the loader as ``(uint8 clips [B, T, C, H, W], labels)``; they
are normalised after the transfer to the device. A source's videos
(:mod:`~poslab.modalities.video.sources.folders`) are decoded, cropped and
augmented in the loader's workers.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

from poslab.data.base import PositionDataModule
from poslab.data.held_out import held_out, split_items
from poslab.errors import ConfigError
from poslab.modalities.video.clips import DIRECTIONS, make_clips, resize_digits
from poslab.modalities.video.sources import SOURCES, VideoFiles, VideoSource
from poslab.modalities.video.sources.folders import DecodedClips
from poslab.modalities.vision.data import patch_coordinates
from poslab.modalities.vision.sources import DIGITS
from poslab.positions import Positions

SPLITS = ("train", "val", "test")


def clip_positions(
    frames: int, grid: tuple[int, int], train: tuple[int, int, int] | None = None, mode: str = "raw"
) -> Positions:
    """Positions of ``frames`` x ``grid`` tokens, frame-major; ``train`` = the training (frames, rows, cols)."""
    cells = patch_coordinates(grid, train[1:] if train else None, mode)  # [gh * gw, 2]
    t = torch.arange(frames).repeat_interleave(len(cells)).float()
    if mode == "rescaled" and train is not None and train[0] != frames:
        t = (t + 0.5) * train[0] / frames - 0.5  # frame centres in training units, as for patch cells
    coords = cells.repeat(frames, 1)
    steps = torch.arange(frames).repeat_interleave(len(cells))
    integral = mode == "raw" or train is None or tuple(train) == (frames, *grid)
    return Positions(
        steps=steps,
        coords=coords,
        coords3d=torch.cat((t[:, None], coords), dim=-1),
        steps_end=frames,
        coords_grid=tuple(grid) if integral else None,
        coords3d_grid=(frames, *grid) if integral else None,
    )


class VideoDataModule(PositionDataModule):
    """Clips of one moving digit, labelled by its direction (8 classes) or the digit (10); or a source's videos,
    labelled by their class."""

    def __init__(self, cfg: Any, seed: int = 0, train_data: Any = None) -> None:
        super().__init__(cfg, seed, train_data)
        train = train_data if train_data is not None else cfg
        self.train_frames = int(train["frames"])  # clips move this long without bouncing
        self.tokens = self._tokens(cfg)
        self.train_tokens = self._tokens(train)
        frames, rows, cols = self.tokens
        self._positions = clip_positions(frames, (rows, cols), self.train_tokens, cfg["coords"])  # made once
        self.splits: dict[str, Dataset] = {}
        self.source: VideoSource = SOURCES[cfg.name]
        self.classes: tuple[str, ...] | None = None  # a source's videos: their classes, known once read (setup)
        self.mean = torch.tensor(self.source.mean).view(1, 1, -1, 1, 1)  # per channel of [B, T, C, H, W]
        self.std = torch.tensor(self.source.std).view(1, 1, -1, 1, 1)

    @staticmethod
    def _tokens(cfg: Any) -> tuple[int, int, int]:
        """(frames, rows, cols) of tokens (whole ones: the config check ``check_video`` sees to that)."""
        cells = cfg["canvas"] // cfg["patch_size"]
        return cfg["frames"] // cfg["tubelet"], cells, cells

    # -- facts -------------------------------------------------------------------------
    @property
    def class_names(self) -> tuple[str, ...]:
        if self.classes is not None:
            return self.classes
        return DIRECTIONS if self.cfg.label == "direction" else DIGITS

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    def positions(self) -> Positions:
        return self._positions

    def model_facts(self) -> dict[str, Any]:
        return {"num_classes": self.num_classes, "in_chans": self.source.channels}

    def context_options(self) -> dict[str, Any]:
        """The training clip's token grid: learned tables are sized by it."""
        frames, rows, cols = self.train_tokens
        return {"grid_size": (rows, cols), "frames": frames, "max_len": frames}

    def similarity_positions(self) -> tuple[Positions, int, None]:
        frames, rows, cols = self.tokens
        return self.positions(), frames * rows * cols, None

    # -- Lightning hooks ---------------------------------------------------------------
    def prepare_data(self) -> None:
        self.source.load(Path(self.cfg.root), self.cfg.download, self.cfg.path)

    def setup(self, stage: str | None = None) -> None:
        """Make the clips of the splits ``stage`` needs (a probe on a large canvas makes only its test clips)."""
        wanted = {"fit": ("train", "val"), "validate": ("val",), "test": ("test",)}.get(stage, SPLITS)
        wanted = [split for split in wanted if split not in self.splits]
        if not wanted:
            return
        loaded = self.source.load(Path(self.cfg.root), False, self.cfg.path)
        if isinstance(loaded, VideoFiles):
            self.splits, self.classes = self._file_splits(loaded), loaded.classes
            return
        images, digits, _, _ = loaded
        order, parts = held_out(len(digits), self.cfg.val_size, self.cfg.test_size, self.cfg.split_seed)
        images, digits = resize_digits(images[order], self.cfg.digit_size), digits[order]
        for split in wanted:
            index = SPLITS.index(split)
            chosen, labels = images[parts[split]], digits[parts[split]]
            if split == "train":  # more clips than digits: each digit again, with another motion
                repeat = torch.arange(self.cfg.train_clips) % len(labels)
                chosen, labels = chosen[repeat], labels[repeat]
            clips, directions = make_clips(
                chosen,
                frames=self.cfg.frames,
                canvas=self.cfg.canvas,
                speed=self.cfg.speed,
                seed=self.cfg.split_seed * len(SPLITS) + index,
                plan_frames=self.train_frames,
            )
            self.splits[split] = TensorDataset(clips, directions if self.cfg.label == "direction" else labels)

    def _file_splits(self, files: VideoFiles) -> dict[str, Dataset]:
        """The videos of ``data.fold``: its test videos, and validation ones held out of its training videos by
        count (as for images: same seed, same counts; also the test when the fold has none)."""
        cfg = self.cfg
        if cfg.fold > len(files.folds):
            valid = ", ".join(str(k) for k in range(1, len(files.folds) + 1))
            raise ConfigError(f"data.fold={cfg.fold}: data={cfg.name} has {len(files.folds)} split(s); valid: {valid}")
        fold = files.folds[cfg.fold - 1]
        parts = split_items(fold.train, fold.test, cfg.val_size, cfg.test_size, cfg.split_seed)
        return {
            k: DecodedClips(
                items,
                cfg.frames,
                cfg.frame_stride,
                cfg.canvas,
                train=k == "train",
                augment=cfg.augment,
                skip_unreadable=cfg.skip_unreadable,
            )  # fmt: skip
            for k, items in parts.items()
        }

    def train_dataloader(self) -> DataLoader:
        workers = self.cfg.num_workers
        return self.shuffled_loader(
            self.splits["train"], self.cfg.batch_size, num_workers=workers, persistent_workers=workers > 0
        )

    def val_dataloader(self) -> DataLoader:
        return self.eval_loader(self.splits["val"], self.cfg.eval_batch_size, self.cfg.num_workers, keep_workers=True)

    def test_dataloader(self) -> DataLoader:
        return self.eval_loader(self.splits["test"], self.cfg.eval_batch_size, self.cfg.num_workers)

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> dict[str, Any]:
        return self.as_batch(batch, self.trainer is not None and self.trainer.training)

    def as_batch(self, batch: Any, training: bool = False) -> dict[str, Any]:
        clips, labels = batch
        x = (clips.float().div_(255) - self.mean.to(clips.device)) / self.std.to(clips.device)
        pos = self.positions().to(clips.device)
        if training and self.cfg.temporal_scales:
            pos = temporally_scaled(pos, self.cfg.temporal_scales)
        return {"video": x, "label": labels, "pos": pos}


def temporally_scaled(pos: Positions, scales: list[float]) -> Positions:
    """HoPE's dynamic temporal scaling: coords3d's frame index times one of ``scales``, drawn from the global
    generator (which a checkpoint restores); the scaled grid is no longer the integral one."""
    gamma = scales[int(torch.randint(len(scales), ()))]
    coords3d = pos.coords3d.clone()
    coords3d[..., 0] *= gamma
    return dataclasses.replace(pos, coords3d=coords3d, coords3d_grid=None)
