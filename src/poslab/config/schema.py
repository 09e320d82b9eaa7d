"""The option blocks every modality extends (``eval.*``, ``model.*``) and the logger's options. Every other option
is declared where it is used (constructors, a modality's ``schema.py``, ``run.*`` beside the run directory, the
optimiser's, schedule's and checkpoint's beside them); :func:`poslab.config.validation.root_schema` joins them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional

MISSING = "???"  # OmegaConf's mark for a value the YAML sets; no OmegaConf import: the modality registry reads this


@dataclass
class EvalConfig:
    """``poslab eval``: the checkpoint to re-evaluate. A modality's eval schema extends it (its probes)."""

    ckpt: Optional[str] = None  # set by `poslab eval ckpt=PATH`


@dataclass
class ModelConfig:
    """The keys every model shares; a modality's model schema extends it with its architecture."""

    compile: bool = False  # torch.compile the backbone: pays a compile up front (docs/clusters.md, "`model.compile`")
    activation_checkpointing: bool = False  # recompute each block in the backward pass: less memory, same gradients


@dataclass
class LoggerConfig:
    """``name`` is the preset (``configs/logger/``); the W&B keys are ignored by csv / tensorboard."""

    name: Literal["wandb", "csv", "tensorboard", "none"] = MISSING
    mode: Literal["auto", "online", "offline", "disabled"] = "auto"  # auto: online with W&B credentials, else offline
    project: str = "poslab"
    entity: Optional[str] = None
    group: Optional[str] = None  # None: <modality>-<task>[-<experiment>]-<encoder>, so seeds aggregate
    tags: list[str] = field(default_factory=list)
    notes: Optional[str] = None
    log_model: bool = False  # checkpoints as W&B artifacts (offline: kept in the run, uploaded by `wandb sync`)
