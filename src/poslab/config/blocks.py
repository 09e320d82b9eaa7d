"""The option blocks every modality extends: ``eval.*`` and ``model.*``'s shared keys.

A leaf, so the modality registry (:mod:`poslab.modalities.registry`) can default a record's ``eval`` schema without
importing the config schema, which reads the encoder registry (:mod:`poslab.config.schema` re-exports both).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass
class EvalConfig:
    """``poslab eval``: the checkpoint to re-evaluate. A modality's eval schema extends it (its probes)."""

    ckpt: Optional[str] = None  # noqa: UP045 (OmegaConf reads typing.Optional)  set by `poslab eval ckpt=PATH`


@dataclass
class ModelConfig:
    """The key every model shares; a modality's model schema extends it with its architecture."""

    #: torch.compile the backbone: pays a compile up front (docs/clusters.md, "`model.compile`")
    compile: bool = False
