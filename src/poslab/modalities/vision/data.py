"""Vision data module: in-memory images (or a folder's files, decoded in the loader's workers), patch
coordinates as positions.

Batches leave the loader as ``(uint8 images, labels)``; normalisation,
resizing to ``data.image_size`` and augmentation run batch-wise after the
transfer to the device (so they run on the GPU when there is one), and the
batch gains its :class:`~poslab.positions.Positions`. A folder's images are
cropped to ``data.image_size`` (and augmented, in training) as they are
decoded (:mod:`~poslab.modalities.vision.sources.folders`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, TensorDataset

from poslab.data.base import PositionDataModule
from poslab.data.held_out import held_out, split_items
from poslab.encoders.grid import grid_coordinates
from poslab.errors import ConfigError
from poslab.modalities.vision.sources import SOURCES, ImageSource
from poslab.modalities.vision.sources.folders import DecodedImages, ImageFiles
from poslab.positions import Positions


def patch_coordinates(
    grid: tuple[int, int], train_grid: tuple[int, int] | None = None, mode: str = "rescaled"
) -> torch.Tensor:
    """(row, col) of each patch, row-major, ``[gh * gw, 2]`` float.

    ``raw``: integer patch indices of this grid. ``rescaled``: patch centres in
    units of the training grid, ``(i + 0.5) · g_train / g − 0.5`` — the points
    at which a bicubic resize of a ``g_train`` table samples (``F.interpolate``
    with ``align_corners=False``), and the identity on the training grid.
    """
    coords = grid_coordinates(grid)
    if mode == "raw" or train_grid is None or tuple(train_grid) == tuple(grid):
        return coords
    if mode != "rescaled":
        raise ConfigError(f"data.coords must be raw or rescaled, got '{mode}'")
    scale = torch.tensor([train_grid[0] / grid[0], train_grid[1] / grid[1]])
    return (coords + 0.5) * scale - 0.5


QUADRANTS = ("top-left", "top-right", "bottom-left", "bottom-right")


def native_size(cfg: Any) -> int:
    """The dataset's image size; twice that for the quadrant task's canvas."""
    return SOURCES[cfg["name"]].size * (2 if cfg["quadrant"] else 1)


def place_in_quadrants(images: torch.Tensor, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The quadrant task: each image in one random quadrant of a blank canvas twice its size.

    The label is the quadrant. Every canvas holds the same patches whichever
    quadrant the digit is in, only in other places: without position
    information the task is at chance.
    """
    n, c, h, w = images.shape
    quadrant = torch.randint(0, 4, (n,), generator=torch.Generator().manual_seed(seed))
    canvas = torch.zeros(n, c, 2 * h, 2 * w, dtype=images.dtype)
    for q in range(4):
        chosen = quadrant == q
        row, col = divmod(q, 2)
        canvas[chosen, :, row * h : (row + 1) * h, col * w : (col + 1) * w] = images[chosen]
    return canvas, quadrant


def random_affine(images: torch.Tensor, rotate: float, scale: float, translate: float) -> torch.Tensor:
    """One random rotation / scale / shift per image (bilinear, background-filled)."""
    n = images.shape[0]
    device = images.device
    angle = (torch.rand(n, device=device) * 2 - 1) * math.radians(rotate)
    zoom = 1 + (torch.rand(n, device=device) * 2 - 1) * scale
    shift = (torch.rand(n, 2, device=device) * 2 - 1) * 2 * translate  # normalised [-1, 1] units
    theta = torch.zeros(n, 2, 3, device=device)
    theta[:, 0, 0] = angle.cos() / zoom
    theta[:, 0, 1] = -angle.sin() / zoom
    theta[:, 1, 0] = angle.sin() / zoom
    theta[:, 1, 1] = angle.cos() / zoom
    theta[:, :, 2] = shift
    grid = F.affine_grid(theta, list(images.shape), align_corners=False)
    background = images.amin(dim=(1, 2, 3), keepdim=True)
    return F.grid_sample(images - background, grid, align_corners=False) + background


class VisionDataModule(PositionDataModule):
    """Image classification data with patch positions.

    ``train_data`` is the ``data`` config the model was trained with (``poslab
    eval`` passes the checkpoint's); its image size fixes the grid that
    ``coords=rescaled`` maps to. Without it, this is the training data.
    """

    def __init__(self, cfg: Any, seed: int = 0, train_data: Any = None) -> None:
        super().__init__(cfg, seed, train_data)
        self.source: ImageSource = SOURCES[cfg.name]
        self.image_size = int(cfg.image_size or native_size(cfg))
        if train_data is None:
            self.train_image_size = self.image_size
        else:
            self.train_image_size = int(train_data["image_size"] or native_size(train_data))
        self.grid = self._grid(self.image_size)
        self.train_grid = self._grid(self.train_image_size)
        self.coords = patch_coordinates(self.grid, self.train_grid, cfg.coords)
        # integer cells when raw or at the training size; rescaled elsewhere they are fractional
        integral = cfg.coords == "raw" or self.grid == self.train_grid
        self.coords_grid = self.grid if integral else None
        self.splits: dict[str, Dataset] = {}
        self.classes = self.source.classes  # a folder's: known once it is read (setup)
        self.decoded = False  # a folder's images: cropped and augmented as they are decoded
        self.mean = torch.tensor(self.source.mean).view(1, -1, 1, 1)
        self.std = torch.tensor(self.source.std).view(1, -1, 1, 1)

    # -- facts the model is built from --------------------------------------
    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def class_names(self) -> tuple[str, ...]:
        return QUADRANTS if self.cfg.quadrant else self.classes

    @property
    def channels(self) -> int:
        return self.source.channels

    @property
    def num_patches(self) -> int:
        return self.grid[0] * self.grid[1]

    def positions(self) -> Positions:
        return Positions(coords=self.coords, coords_grid=self.coords_grid)

    def similarity_positions(self) -> tuple[Positions, int, tuple[int, int]]:
        """What the encoder figure draws: these positions, how many tokens, their grid."""
        return self.positions(), self.num_patches, self.grid

    def model_facts(self) -> dict[str, Any]:
        """What the task is sized by."""
        return {"num_classes": self.num_classes, "in_chans": self.channels}

    def context_options(self) -> dict[str, Any]:
        """What the data tells the encoder (fills options left null)."""
        return {"grid_size": self.train_grid}

    def _grid(self, size: int) -> tuple[int, int]:
        patch = self.cfg.patch_size
        if size % patch:
            raise ConfigError(f"data.image_size={size} is not a multiple of data.patch_size={patch}")
        return size // patch, size // patch

    # -- Lightning hooks -------------------------------------------------------
    def prepare_data(self) -> None:
        self.source.load(Path(self.cfg.root), self.cfg.download, self.cfg.path)

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        loaded = self.source.load(Path(self.cfg.root), False, self.cfg.path)
        if isinstance(loaded, ImageFiles):
            self.splits, self.classes, self.decoded = self._file_splits(loaded), loaded.classes, True
            return
        train_x, train_y, test_x, test_y = loaded
        n_test = self.cfg.test_size if test_x is None else 0  # mnist5k has no test split: carved out too
        order, held = held_out(len(train_y), self.cfg.val_size, n_test, self.cfg.split_seed)
        train_x, train_y = train_x[order], train_y[order]
        parts = {k: (train_x[cut], train_y[cut]) for k, cut in held.items()}
        parts.setdefault("test", (test_x, test_y))
        if self.cfg.quadrant:
            parts = {k: place_in_quadrants(x, self.cfg.split_seed + i) for i, (k, (x, _)) in enumerate(parts.items())}
        self.splits = {k: TensorDataset(x, y) for k, (x, y) in parts.items()}

    def _file_splits(self, files: ImageFiles) -> dict[str, Dataset]:
        """A folder's files as the splits, held out as the in-memory sets are (same seed, same counts)."""
        if self.cfg.quadrant:
            raise ConfigError("data.quadrant places in-memory images on a canvas; data=imagefolder reads files")
        parts = split_items(files.train, files.test, self.cfg.val_size, self.cfg.test_size, self.cfg.split_seed)
        aug = self.cfg.augment
        return {
            k: DecodedImages(
                items,
                self.image_size,
                train=aug.enabled and k == "train",
                crop=self.source.eval_crop,
                randaugment=aug.randaugment,
                skip_unreadable=self.cfg.skip_unreadable,
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
        return self.as_batch(batch, training=self.trainer is not None and self.trainer.training)

    def as_batch(self, batch: Any, training: bool = False) -> dict[str, Any]:
        images, labels = batch
        image = self.prepare_images(images, augment=training)
        if training:
            image, labels = self.mix(image, labels)
        return {"image": image, "label": labels, "pos": self.positions().to(images.device)}

    def mix(self, images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mixup (Zhang et al. 2018) or CutMix (Yun et al. 2019), one of the two per batch as DeiT draws them:
        the labels become a distribution over the classes (torchvision's ``MixUp`` / ``CutMix``)."""
        aug = self.cfg.augment
        if not aug.enabled or not (aug.mixup or aug.cutmix):
            return images, labels
        from torchvision.transforms import v2  # deferred: torchvision, ~4.6 s

        k = self.num_classes
        choices = [v2.MixUp(alpha=aug.mixup, num_classes=k)] if aug.mixup else []
        choices += [v2.CutMix(alpha=aug.cutmix, num_classes=k)] if aug.cutmix else []
        return v2.RandomChoice(choices)(images, labels)

    def prepare_images(self, images: torch.Tensor, augment: bool = False) -> torch.Tensor:
        """uint8 ``[B, C, H, W]`` -> normalised float at ``image_size``, augmented in training."""
        x = images.float().div_(255)
        x = (x - self.mean.to(x.device)) / self.std.to(x.device)
        if x.shape[-1] != self.image_size or x.shape[-2] != self.image_size:
            x = F.interpolate(x, size=(self.image_size, self.image_size), mode="bilinear", antialias=True)
        aug = self.cfg.augment
        if augment and aug.enabled and not self.decoded:  # a folder's were cropped at random when decoded
            x = random_affine(x, aug.rotate, aug.scale, aug.translate)
        if augment and aug.enabled and aug.erasing:  # DeiT's random erasing: a box of noise, image by image
            from torchvision.transforms import v2  # deferred: torchvision, ~4.6 s

            erase = v2.RandomErasing(p=aug.erasing, value="random")
            x = torch.stack([erase(image) for image in x])
        return x
