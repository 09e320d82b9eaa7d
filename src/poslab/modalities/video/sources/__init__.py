"""Video datasets: the built-in moving digits, and videos read from files.

A source's ``load(root, download, path=None)`` returns the embedded MNIST
digits for ``moving_mnist`` (the data module draws the clips from them) or a
:class:`VideoFiles`: the class names and, per official split, the
``(video, label)`` pairs of its training and test videos, where a video is a
file PyAV decodes or a folder of frame images. Frames are decoded in the data
loader's worker processes when a batch needs them
(:mod:`~poslab.modalities.video.sources.folders`).

A module added to this package registers one more source (``make new-dataset``);
``SAMPLES`` writes a tiny copy of each source's files for the tests.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from poslab.data.sources import discover
from poslab.modalities.vision.sources import SOURCES as IMAGE_SOURCES
from poslab.modalities.vision.sources import load_mnist5k

#: ``(video file or frame folder, class index)``
Video = tuple[str, int]


@dataclass(frozen=True)
class Fold:
    """One train / test split of a dataset's videos; ``test`` None: held out of ``train`` by count."""

    train: list[Video]
    test: list[Video] | None


@dataclass(frozen=True)
class VideoFiles:
    """What a source reading videos returns: class names, and its splits (``data.fold`` picks one; UCF101 has
    three official ones, a folder one)."""

    classes: tuple[str, ...]
    folds: tuple[Fold, ...]


@dataclass(frozen=True)
class VideoSource:
    load: Callable  # (root, download, path=None), the signature every source of every modality has
    channels: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    defaults: dict = field(default_factory=dict)  # data.* values of its own (a config's still win)


def _sample_moving_mnist(root: Path) -> list[str]:
    return []  # the digits ship inside a package: nothing to write


_MNIST = IMAGE_SOURCES["mnist5k"]
SOURCES: dict[str, VideoSource] = {"moving_mnist": VideoSource(load_mnist5k, 1, _MNIST.mean, _MNIST.std)}
#: name -> ``sample(root)``: writes a tiny copy of what the loader reads into ``root`` and returns the config
#: overrides that read it (``data.path=…``), often none.
SAMPLES: dict[str, Callable[[Path], list[str]]] = {"moving_mnist": _sample_moving_mnist}
#: What a loader returns and how a new source registers (``make new-dataset`` writes these into its stub).
STUB_IMPORTS = "VideoFiles, Fold, VideoSource"
RETURNS = "VideoFiles(classes, folds): per split, (video file or frame folder, label) pairs; test None: held out"
REGISTER = 'SOURCES["{name}"] = VideoSource(load_{name}, channels=3, mean=(0.5,) * 3, std=(0.5,) * 3)'

discover(__name__, __path__)
