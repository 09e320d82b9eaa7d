"""The config files on disk: where they live, which choices a group offers, a modality's position fields.

A leaf of the house (it imports no other poslab module but the errors), so that the encoder and modality
registries can ask which modalities exist and what positions each provides without importing
:mod:`poslab.config`, which joins them.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from poslab.errors import ConfigError


def config_dir() -> Path:
    """Where the YAML lives: ``$POSLAB_CONFIG_DIR``; else the checkout's ``configs/`` (an editable install,
    ``PYTHONPATH=src``); else the copy a wheel installs under ``<prefix>/share/poslab/configs``."""
    import sys

    env = os.environ.get("POSLAB_CONFIG_DIR")
    if env:
        return Path(env)
    here = Path(__file__).resolve()
    candidates = [here.parents[2] / "configs"]  # src/poslab/config_files.py -> the checkout
    candidates += [here.parents[i] / "share" / "poslab" / "configs" for i in (3, 4)]  # <prefix>/lib/pythonX/...
    candidates.append(Path(sys.prefix) / "share" / "poslab" / "configs")
    return next((c for c in candidates if (c / "train.yaml").is_file()), candidates[0])


def modality_positions(modality: str) -> tuple[str, ...]:
    """The ``Positions`` fields a modality's data provides (``positions:`` in its YAML)."""
    return _modality_positions(str(config_dir()), modality)


@functools.cache
def _modality_positions(folder: str, modality: str) -> tuple[str, ...]:
    path = Path(folder) / "modality" / f"{modality}.yaml"
    return tuple(OmegaConf.load(path).get("positions") or ()) if path.is_file() else ()


def group_choices(group: str) -> list[str]:
    folder = config_dir() / group
    return sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []


def load_yaml(path: Path) -> DictConfig:
    try:
        cfg = OmegaConf.load(path)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except Exception as exc:  # YAML syntax errors
        raise ConfigError(f"cannot read {path}: {str(exc).splitlines()[0]}") from None
    if not isinstance(cfg, DictConfig):
        raise ConfigError(f"{path} must hold a mapping at the top level")
    return cfg
