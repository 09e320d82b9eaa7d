"""The option blocks every modality extends (``eval.*``, ``model.*``). Every other option
is declared where it is used (constructors, a modality's ``schema.py``, ``run.*`` beside the run directory, the
optimiser's, schedule's and checkpoint's beside them); :func:`poslab.config.root.root_schema` joins them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

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
