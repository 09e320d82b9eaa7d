"""LightningModules: each modality names its tasks (``task.name`` -> class); imported lazily (they import Lightning).
Its record builds one (:meth:`~poslab.modalities.registry.Modality.task_for`)."""

from __future__ import annotations

from typing import Any

from poslab.modalities.registry import get_modality


def task_class(modality: str, name: str):
    return get_modality(modality).task_class(name)


def build_task(cfg: Any, datamodule: Any):
    """The task module for ``cfg``, sized by what the data module reports (:meth:`Modality.task_for`)."""
    from poslab.config.composition import to_dict  # deferred: torch (the encoders), ~2.6 s

    return get_modality(cfg.modality).task_for(to_dict(cfg), datamodule)


def task_from_checkpoint(checkpoint: dict):
    """Rebuild a task from a checkpoint loaded with ``weights_only=True``."""
    hparams = checkpoint["hyper_parameters"]
    cfg = hparams["cfg"]
    task = task_class(cfg["modality"], cfg["task"]["name"])(**hparams)
    task.load_state_dict(checkpoint["state_dict"])
    return task
