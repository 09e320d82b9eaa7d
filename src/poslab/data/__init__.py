"""Data modules, one per modality. Positions are produced here, not in the model.

Modules that import Lightning are imported lazily, so the CLI's help and the
config validation stay fast. Each data module offers ``model_facts()`` (what
the task is sized by) and ``context_options()`` (encoder options the data
knows: the training patch grid, the longest position).
"""

from __future__ import annotations

import importlib
from typing import Any

#: modality -> (module, class)
DATAMODULES = {
    "vision": ("poslab.data.vision", "VisionDataModule"),
    "text": ("poslab.data.text", "TextDataModule"),
    "timeseries": ("poslab.data.timeseries", "TimeSeriesDataModule"),
}
#: data.name values with a data module of their own
SPECIAL = {
    "copy": ("poslab.data.sequence", "SequenceDataModule"),
    "reverse": ("poslab.data.sequence", "SequenceDataModule"),
    "associative_recall": ("poslab.data.sequence", "SequenceDataModule"),
}


def build_datamodule(cfg: Any, train_cfg: Any = None):
    """The Lightning data module of ``cfg.modality``.

    ``train_cfg``: the config a checkpoint was trained with, when evaluating it
    on other data (the data module decides what it needs from it).
    """
    module, name = SPECIAL.get(cfg.data.name) or DATAMODULES[cfg.modality]
    cls = getattr(importlib.import_module(module), name)
    options = {}
    if cfg.modality == "text":  # the length study's lengths decide which held-out characters every length scores
        options["multiples"] = list(cfg.eval.multiples)
    return cls(cfg.data, seed=cfg.seed, train_data=train_cfg["data"] if train_cfg else None, **options)
