"""LightningModules, chosen by ``task.name``; imported lazily (they import Lightning).

A task is built from the resolved config, the facts its data module reports
(``model_facts()``: classes, vocabulary) and the encoder options the data
knows (``context_options()``); all three are plain containers saved as
hyper-parameters, so checkpoints reload with ``weights_only=True``.
"""

from __future__ import annotations

import importlib
from typing import Any

#: task.name -> (module, class)
TASKS = {
    "classification": ("poslab.tasks.classification", "ImageClassifier"),
    "lm": ("poslab.tasks.language_model", "LanguageModel"),
    "sequence": ("poslab.tasks.sequence", "SequenceTask"),
    "forecast": ("poslab.tasks.forecasting", "ForecastTask"),
}


def task_class(name: str):
    module, cls = TASKS[name]
    return getattr(importlib.import_module(module), cls)


def build_task(cfg: Any, datamodule: Any):
    """The task module for ``cfg``, sized by what the data module reports."""
    from poslab.config import to_dict

    cls = task_class(cfg.task.name)
    return cls(to_dict(cfg), **datamodule.model_facts(), context=datamodule.context_options())


def task_from_checkpoint(checkpoint: dict):
    """Rebuild a task from a checkpoint loaded with ``weights_only=True``."""
    hparams = checkpoint["hyper_parameters"]
    task = task_class(hparams["cfg"]["task"]["name"])(**hparams)
    task.load_state_dict(checkpoint["state_dict"])
    return task
