"""Shared data plumbing: the data-module interface (:mod:`poslab.data.base`), resumable loaders, downloads.

Each modality's data modules live in its package (``poslab.modalities.<name>``);
:func:`build_datamodule` asks the modality which one serves ``data.name``.
Modules that import Lightning are imported lazily, so the CLI's help and the
config validation stay fast.
"""

from __future__ import annotations

from typing import Any

from poslab.modalities.registry import get_modality


def build_datamodule(cfg: Any, train_cfg: Any = None):
    """The Lightning data module serving ``cfg.data.name`` in ``cfg.modality``.

    ``train_cfg``: the config a checkpoint was trained with, when evaluating it
    on other data (the data module decides what it needs from it).
    """
    return get_modality(cfg.modality).datamodule_for(cfg, train_cfg)
