"""Data modules, one per modality. Positions are produced here, not in the model.

Modules that import Lightning are imported lazily (``datamodule_for``) so the
CLI's help and the config validation stay fast.
"""

from __future__ import annotations

from typing import Any


def build_datamodule(cfg: Any, train_cfg: Any = None):
    """The Lightning data module of ``cfg.modality``.

    ``train_cfg``: the config a checkpoint was trained with, when evaluating it
    on other data (the data module decides what it needs from it).
    """
    if cfg.modality == "vision":
        from poslab.data.vision import VisionDataModule

        return VisionDataModule(cfg.data, train_data=train_cfg["data"] if train_cfg else None)
    raise ValueError(f"no data module for modality '{cfg.modality}'")
