"""LightningModules: each modality names its tasks (``task.name`` -> class); imported lazily (they import Lightning).

A task is built from the resolved config, the facts its data module reports
(``model_facts()``: classes, vocabulary) and the encoder options the data
knows (``context_options()``); all three are plain containers saved as
hyper-parameters, so checkpoints reload with ``weights_only=True``.
"""

from __future__ import annotations

from typing import Any

from poslab.modalities.registry import get_modality


def task_class(modality: str, name: str):
    return get_modality(modality).task_class(name)


def build_task(cfg: Any, datamodule: Any):
    """The task module for ``cfg``, sized by what the data module reports."""
    from poslab.config.composition import to_dict

    cls = task_class(cfg.modality, cfg.task.name)
    return cls(to_dict(cfg), **datamodule.model_facts(), context=datamodule.context_options())


def task_from_checkpoint(checkpoint: dict):
    """Rebuild a task from a checkpoint loaded with ``weights_only=True``."""
    hparams = checkpoint["hyper_parameters"]
    cfg = hparams["cfg"]
    task = task_class(cfg["modality"], cfg["task"]["name"])(**hparams)
    task.load_state_dict(checkpoint["state_dict"])
    return task
