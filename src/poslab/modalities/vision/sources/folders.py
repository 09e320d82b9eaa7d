"""Image sets read file by file: ``imagefolder`` (a folder of class subfolders, the ImageNet / torchvision
layout) and ``tiny_imagenet`` (Tiny-ImageNet-200, downloaded).

``data.path=<dir>`` holds ``train/<class>/*`` and ``val/<class>/*`` (or ``test/``), or the class folders
themselves (validation and test images are then held out of them by count, as for the other sources). Any
format PIL reads. The pixels are not loaded here: each image is decoded, converted to RGB and cropped to
``data.image_size`` in the data loader's worker processes when a batch needs it (``data.num_workers``), so a
set larger than memory trains; the small built-in sets stay in memory, where a CPU epoch is faster.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError

from poslab.data.labelled_files import LabelledFiles
from poslab.errors import DataError
from poslab.modalities.vision.sources import SAMPLES, SOURCES, ImageSource

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
#: DeiT / timm evaluate at ``image_size`` after resizing the short side to ``image_size / 0.875`` (256 for 224).
CROP_FRACTION = 0.875


@dataclass(frozen=True)
class ImageFiles:
    """What ``load_imagefolder`` returns instead of pixels: the class names and ``(file, label)`` pairs."""

    classes: tuple[str, ...]
    train: list[tuple[str, int]]
    test: list[tuple[str, int]] | None  # None: no val/ or test/ folder; held out of train


def image_suffixes() -> set[str]:
    """Every suffix PIL reads (it loads its format plugins to list them)."""
    return {s.lower() for s in Image.registered_extensions()}


def scan(folder: Path) -> dict[str, list[Path]]:
    """Class name -> its image files, sorted; an empty class folder, or none, is one line naming the folder."""
    if not folder.is_dir():
        raise DataError(f"{folder} is not a folder of class subfolders (data.path)")
    suffixes = image_suffixes()
    classes = {}
    for sub in sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")):
        files = sorted(f for f in sub.rglob("*") if f.suffix.lower() in suffixes and f.is_file())
        if not files:
            raise DataError(f"{sub}: class folder holds no image ({', '.join(sorted(suffixes)[:6])}, ...)")
        classes[sub.name] = files
    if not classes:
        raise DataError(f"{folder} holds no class subfolders: expected <class>/<image> (the ImageNet layout)")
    return classes


def load_imagefolder(root: Path, download: bool, path: str | None = None) -> ImageFiles:
    """The files of ``path`` (``root`` is unused: nothing is downloaded or cached)."""
    return ImageFiles(*split_folders(path, scan, "data=imagefolder"))


def split_folders(
    path: str | None, scan_classes: Callable[[Path], dict[str, list[Path]]], source: str
) -> tuple[tuple[str, ...], list[tuple[str, int]], list[tuple[str, int]] | None]:
    """Class names and ``(file, label)`` pairs of ``path``'s ``train/`` and ``val/`` (or ``test/``) class folders,
    or of its class folders (test None: held out by count); a held-out class unseen in training is one line."""
    if not path:
        raise DataError(f"{source} reads a folder of class subfolders: set data.path=<dir>")
    base = Path(path).expanduser()
    split = (base / "train").is_dir()
    train = scan_classes(base / "train" if split else base)
    held = next((base / name for name in ("val", "test") if split and (base / name).is_dir()), None)
    test = scan_classes(held) if held else None
    for name in sorted(set(test or ()) - set(train)):
        raise DataError(f"{held / name}: class '{name}' is in {held.name}/ but not in train/")
    classes = tuple(train)
    index = {name: i for i, name in enumerate(classes)}

    def pairs(found: dict[str, list[Path]]) -> list[tuple[str, int]]:
        return [(str(f), index[name]) for name, files in found.items() for f in files]

    return classes, pairs(train), pairs(test) if test else None


class DecodedImages(LabelledFiles):
    """``(uint8 [3, size, size], label)`` per file, decoded when asked (in a loader worker). Training crops a
    random area and flips (RandomResizedCrop, DeiT's scale 0.08-1), then RandAugment if asked; evaluation resizes
    the short side to ``size / crop`` and takes the centre (0.875; 1: the whole image). A file PIL cannot read:
    :class:`~poslab.data.labelled_files.LabelledFiles` says or skips it."""

    kind = "image"

    def __init__(
        self,
        items: list[tuple[str, int]],
        size: int,
        train: bool,
        crop: float = CROP_FRACTION,
        randaugment: bool = False,
        skip_unreadable: bool = False,
    ) -> None:
        from torchvision.transforms import v2  # deferred: torchvision, ~4.6 s

        super().__init__(items, skip_unreadable)
        self.size = size
        resize = [v2.RandomResizedCrop(size, scale=(0.08, 1.0), antialias=True), v2.RandomHorizontalFlip()]
        resize += [v2.RandAugment(num_ops=2, magnitude=9)] if randaugment else []  # DeiT's rand-m9 (n 2)
        if not train:
            resize = [v2.Resize(round(size / crop), antialias=True), v2.CenterCrop(size)]
        self.transform = v2.Compose([v2.PILToTensor(), *resize])

    def read(self, path: str) -> torch.Tensor:
        return self.transform(read_rgb(path))


def read_rgb(path: str | Path) -> Image.Image:
    """An image file as RGB (grayscale, palette, CMYK converted, as torchvision's ImageFolder reads them); one
    line naming the file when PIL cannot read it (truncated, corrupt, not an image)."""
    try:
        with Image.open(path) as image:
            return image.convert("RGB")
    except (OSError, UnidentifiedImageError, ValueError) as exc:
        raise DataError(f"{path}: not a readable image ({str(exc).splitlines()[0] or type(exc).__name__})") from None


def sample_imagefolder(root: Path) -> list[str]:
    """``train/`` and ``val/`` of three classes, PNG and JPEG, of mixed sizes and modes (as ImageNet's are)."""
    rng = np.random.default_rng(0)
    base = root / "imagefolder"
    for split, count in (("train", 8), ("val", 2)):
        for c, name in enumerate(("ant", "bee", "cat")):
            folder = base / split / name
            folder.mkdir(parents=True, exist_ok=True)
            for k in range(count):
                size = (40 + 8 * k, 36 + 4 * c)
                pixels = rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)
                image = Image.fromarray(pixels).convert("L" if k == 1 else "RGB")
                image.save(folder / f"{k}.{'jpg' if k % 2 else 'png'}")
    return [f"data.path={base}", "data.image_size=32", "data.patch_size=8", "data.val_size=4"]


TINY_IMAGENET_URL = "http://cs231n.stanford.edu/tiny-imagenet-200.zip"
TINY_IMAGENET_MD5 = "90528d7ca1a48142e341f4ef8d21d0de"  # as loaders of it record it; nobody publishes a SHA-256


def load_tiny_imagenet(root: Path, download: bool, path: str | None = None) -> ImageFiles:
    """Tiny-ImageNet-200 (Stanford CS231n): 200 classes of 64-px images, 500 each in ``train/<wnid>/images/``,
    50 each in ``val/images/`` labelled by ``val/val_annotations.txt`` (the test split here; the official test
    images have no labels). Downloaded by torchvision (MD5-checked) into a temporary folder, moved in whole."""
    folder = root / "tiny-imagenet-200"
    if download and not (folder / "wnids.txt").is_file():
        from torchvision.datasets.utils import download_and_extract_archive  # deferred: torchvision, ~4.6 s

        root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=root, prefix=".tiny-imagenet-") as tmp:
            try:
                download_and_extract_archive(TINY_IMAGENET_URL, tmp, md5=TINY_IMAGENET_MD5)
            except Exception as exc:  # noqa: BLE001  (urllib's, zipfile's, torchvision's checksum error: one line)
                raise DataError(f"downloading Tiny-ImageNet failed: {str(exc).splitlines()[0]}") from None
            os.replace(Path(tmp) / "tiny-imagenet-200", folder)
    if not (folder / "wnids.txt").is_file():
        raise DataError(f"Tiny-ImageNet not found under {root} ({folder}/wnids.txt); set data.download=true")
    classes = tuple(sorted(folder.joinpath("wnids.txt").read_text().split()))
    index = {name: i for i, name in enumerate(classes)}
    train = scan(folder / "train")
    missing = sorted(set(classes) - set(train))
    if missing or len(train) != len(classes):
        raise DataError(f"{folder / 'train'} does not hold wnids.txt's classes ({(missing or sorted(train))[0]})")
    test = []
    for line_number, line in enumerate((folder / "val" / "val_annotations.txt").read_text().splitlines(), 1):
        name, wnid, *_ = line.split("\t") + [""]
        if wnid not in index:
            raise DataError(f"{folder / 'val' / 'val_annotations.txt'}:{line_number}: unknown class {wnid!r}")
        test.append((str(folder / "val" / "images" / name), index[wnid]))
    return ImageFiles(classes, [(str(f), index[c]) for c in classes for f in train[c]], test)


def sample_tiny_imagenet(root: Path, classes: int = 3, train: int = 6, val: int = 2) -> list[str]:
    """Tiny-ImageNet's layout, with ``classes`` wnids: train images and their box files, val images listed in
    ``val_annotations.txt``, unlabelled test images, ``wnids.txt`` and ``words.txt``."""
    rng = np.random.default_rng(0)
    folder = root / "tiny-imagenet-200"
    wnids = [f"n0{1443537 + k}" for k in range(classes)]
    (folder / "val" / "images").mkdir(parents=True)
    (folder / "test" / "images").mkdir(parents=True)
    annotations = []
    for c, wnid in enumerate(wnids):
        images = folder / "train" / wnid / "images"
        images.mkdir(parents=True)
        for k in range(train):
            Image.fromarray(rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(images / f"{wnid}_{k}.JPEG")
        (folder / "train" / wnid / f"{wnid}_boxes.txt").write_text(f"{wnid}_0.JPEG\t0\t0\t63\t63\n")
        for k in range(val):
            name = f"val_{c * val + k}.JPEG"
            Image.fromarray(rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(folder / "val" / "images" / name)
            annotations.append(f"{name}\t{wnid}\t0\t0\t63\t63")
    Image.fromarray(rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(folder / "test" / "images" / "test_0.JPEG")
    (folder / "val" / "val_annotations.txt").write_text("\n".join(annotations) + "\n")
    (folder / "wnids.txt").write_text("\n".join(reversed(wnids)) + "\n")
    (folder / "words.txt").write_text("".join(f"{w}\tthing {w}\n" for w in wnids))
    return ["data.val_size=3"]


SOURCES["imagefolder"] = ImageSource(
    load_imagefolder, 3, 224, (), IMAGENET_MEAN, IMAGENET_STD,
    defaults={"patch_size": 16, "num_workers": min(8, len(os.sched_getaffinity(0)))},  # decoding runs in workers
)  # fmt: skip
SAMPLES["imagefolder"] = sample_imagefolder
SOURCES["tiny_imagenet"] = ImageSource(
    load_tiny_imagenet, 3, 64, (), (0.4802, 0.4481, 0.3975), (0.2770, 0.2691, 0.2821),
    defaults={"patch_size": 8, "num_workers": min(8, len(os.sched_getaffinity(0)))},
    eval_crop=1.0,  # 64-px images are tested whole
)  # fmt: skip
SAMPLES["tiny_imagenet"] = sample_tiny_imagenet
