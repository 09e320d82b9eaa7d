"""Data sources are found the way encoders are: one file each, no list to edit.

A modality that reads datasets has a ``sources`` package holding two dicts:
``SOURCES`` (name -> loader, ``load(root, download, path=None)`` in every
modality) and ``SAMPLES`` (name -> a writer of a tiny generated copy of what
the loader reads, so every source runs in the tests without the network). A
module dropped into that package adds its own entries; the package imports
every module in it when it is first imported, before the config schema reads
the names.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Iterable
from typing import Any

from poslab import entry_points
from poslab.modalities.registry import available_modalities, get_modality


def discover(package: str, path: Iterable[str]) -> None:
    """Import every module of a ``sources`` package (each registers its own dataset)."""
    for info in pkgutil.iter_modules(path):
        if not info.name.startswith("_"):
            importlib.import_module(f"{package}.{info.name}")
    entry_points.load("poslab.sources", modality=package.split(".")[-2])  # poslab.modalities.<m>.sources


def source_modules() -> dict[str, object]:
    """Modality name -> its ``sources`` package, for every modality that reads datasets: the ``sources``
    package beside its data module, so a plugin's modality (its own package) carries datasets too."""
    found = {}
    for modality in available_modalities():
        ref = get_modality(modality).datamodule
        module = ref.split(":")[0] if isinstance(ref, str) else ref.__module__
        package = module.rpartition(".")[0] + ".sources"
        try:
            found[modality] = importlib.import_module(package)
        except ModuleNotFoundError as exc:  # a modality that generates its data (the template's toy task) has none
            if not package.startswith(exc.name or "\0"):
                raise
    return found


def source_defaults(modality: str, name: str | None) -> dict[str, Any]:
    """``data.*`` values the dataset ``name`` of ``modality`` declares for itself (CIFAR-10's 32-px images
    take 8-px patches, not MNIST's 7), or none."""
    if name is None:
        name = next((f.default for f in dataclasses.fields(get_modality(modality).data) if f.name == "name"), None)
    package = source_modules().get(modality)
    source = getattr(package, "SOURCES", {}).get(name) if package else None
    return dict(getattr(source, "defaults", None) or {})
