"""LightningModules, chosen by ``task.name``; imported lazily (they import Lightning)."""

from __future__ import annotations

from typing import Any


def build_task(cfg: Any, datamodule: Any):
    """The task module for ``cfg``, sized by what the data module reports."""
    from poslab.config import to_dict

    if cfg.task.name == "classification":
        from poslab.tasks.classification import ImageClassifier

        return ImageClassifier(
            to_dict(cfg),
            num_classes=datamodule.num_classes,
            in_chans=datamodule.channels,
            context=datamodule.context(),
        )
    raise ValueError(f"no task '{cfg.task.name}'")


def task_from_checkpoint(checkpoint: dict):
    """Rebuild a task from a checkpoint loaded with ``weights_only=True``."""
    hparams = checkpoint["hyper_parameters"]
    name = hparams["cfg"]["task"]["name"]
    if name == "classification":
        from poslab.tasks.classification import ImageClassifier

        task = ImageClassifier(**hparams)
    else:
        raise ValueError(f"no task '{name}'")
    task.load_state_dict(checkpoint["state_dict"])
    return task
