"""Plugins outside the checkout: an installed package adds encoders, modalities and datasets to poslab by
declaring entry points, and its ``configs/`` folder overlays the packaged configs.

In the plugin's ``pyproject.toml``::

    [project.entry-points."poslab.encoders"]
    myenc = "mypkg.myenc"            # a module whose @register_encoder classes register on import
    [project.entry-points."poslab.modalities"]
    audio = "mypkg.audio"            # a package calling register_modality (its YAML: mypkg/configs/modality/)
    [project.entry-points."poslab.sources"]
    "vision.digits" = "mypkg.digits" # <modality>.<name>: adds to that modality's SOURCES and SAMPLES

A leaf of the house: it imports nothing of poslab's but the errors.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from importlib import metadata
from pathlib import Path
from types import ModuleType

from poslab.errors import ConfigError, first_line

GROUPS = ("poslab.encoders", "poslab.modalities", "poslab.sources")


def entry_points(group: str) -> list[metadata.EntryPoint]:
    """``group``'s entry points of the installed packages, by name."""
    return list(_scanned(tuple(sys.path)).get(group, ()))


@functools.lru_cache(maxsize=4)
def _scanned(path: tuple[str, ...]) -> dict[str, tuple[metadata.EntryPoint, ...]]:
    """Every poslab group's entry points, read once per ``sys.path``: reading them means opening every installed
    package's metadata (10 ms here), and composing one config looks 20 times."""
    found = {group: metadata.entry_points(group=group) for group in GROUPS}
    return {group: tuple(sorted(eps, key=lambda ep: ep.name)) for group, eps in found.items()}


def load(group: str, modality: str | None = None) -> list[ModuleType]:
    """Import the modules ``group``'s entry points name (each registers what it adds); for sources, only
    those of ``modality``. One that fails is one line naming the plugin."""
    loaded = []
    for ep in entry_points(group):
        if modality is not None and ep.name.split(".", 1)[0] != modality:
            continue
        try:
            loaded.append(ep.load())
        except Exception as exc:  # noqa: BLE001  (whatever the plugin raises: one line naming it)
            raise ConfigError(f"plugin {ep.name} = {ep.value} ({group}) does not load: {first_line(exc)}") from None
    return loaded


def plugin_packages() -> set[str]:
    """The top-level packages the installed plugins' entry points live in (found without importing them)."""
    return {ep.value.split(":")[0].split(".")[0] for group in GROUPS for ep in entry_points(group)}


def plugin_config_dirs() -> list[Path]:
    """The ``configs/`` folder at the top of each plugin's package, where it has one (found without importing
    the plugin)."""
    found: list[Path] = []
    for group in GROUPS:
        for ep in entry_points(group):
            spec = importlib.util.find_spec(ep.value.split(":")[0].split(".")[0])
            for location in (spec.submodule_search_locations or []) if spec else []:
                folder = Path(location) / "configs"
                if folder.is_dir() and folder not in found:
                    found.append(folder)
    return found


def import_class(path: str, base: type | tuple[type, ...], what: str) -> type:
    """The class at import path ``path`` (``mypkg.callbacks.Probe``, LightningCLI's ``class_path``), a subclass of
    ``base``; one line naming ``what`` asked for it when the module, the name or the kind is wrong."""
    module_name, _, name = str(path).rpartition(".")
    if not module_name:
        raise ConfigError(f"{what}: {path!r} is not an import path (module.Class)")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"{what}: cannot import {module_name!r} for {path!r} ({first_line(exc)})") from None
    cls = getattr(module, name, None)
    if not isinstance(cls, type):
        raise ConfigError(f"{what}: {module_name!r} has no class {name!r}")
    if not issubclass(cls, base):
        kinds = " or ".join(b.__name__ for b in (base if isinstance(base, tuple) else (base,)))
        raise ConfigError(f"{what}: {path} is not a subclass of {kinds}")
    return cls
