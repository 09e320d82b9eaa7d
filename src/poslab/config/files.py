"""The config files on disk: where they live, which choices a group offers, a modality's position fields. A
leaf, so the registries can ask without importing :mod:`poslab.config.composition`, which joins them."""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from poslab import entry_points
from poslab.errors import ConfigError


def config_dir() -> Path:
    """The packaged configs: the checkout's ``configs/`` (an editable install, ``PYTHONPATH=src``), else the
    copy a wheel installs under ``<prefix>/share/poslab/configs``."""
    here = Path(__file__).resolve()
    candidates = [here.parents[3] / "configs"]  # src/poslab/config/files.py -> the checkout
    candidates += [here.parents[i] / "share" / "poslab" / "configs" for i in (4, 5)]  # <prefix>/lib/pythonX/...
    candidates.append(Path(sys.prefix) / "share" / "poslab" / "configs")
    return next((c for c in candidates if (c / "train.yaml").is_file()), candidates[0])


def config_dirs() -> list[Path]:
    """The config folders, first wins file by file: each folder of ``$POSLAB_CONFIG_DIR`` (several joined by
    ``os.pathsep``: a fork's or a user's own YAML), then each installed plugin's ``configs/``, then the
    packaged configs. A folder needs only the files it adds or replaces."""
    user = [Path(p) for p in os.environ.get("POSLAB_CONFIG_DIR", "").split(os.pathsep) if p]
    return list(dict.fromkeys([*user, *entry_points.plugin_config_dirs(), config_dir()]))


def find_config(relative: str) -> Path | None:
    """The first folder's ``relative`` file (``modality/text.yaml``), or None."""
    return next((d / relative for d in config_dirs() if (d / relative).is_file()), None)


def modality_positions(modality: str, key: str = "positions") -> tuple[str, ...]:
    """What a modality's YAML lists: the ``Positions`` fields its data provides, or what its training ``offers``."""
    path = find_config(f"modality/{modality}.yaml")
    return _modality_list(str(path), key) if path else ()


@functools.cache
def _modality_list(path: str, key: str) -> tuple[str, ...]:
    return tuple(OmegaConf.load(path).get(key) or ())


def group_choices(group: str) -> list[str]:
    """The names a group offers, over every config folder."""
    return sorted({p.stem for d in config_dirs() if (d / group).is_dir() for p in (d / group).glob("*.yaml")})


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
