"""The whole config's schema, torch-free: the command line's keys are checked against it before torch loads."""

from __future__ import annotations

from dataclasses import field, make_dataclass
from typing import Annotated, Any, Optional

from poslab.config.ranges import AT_LEAST_1, SEED
from poslab.config.schema import MISSING
from poslab.run.rundir import RunConfig
from poslab.track.logger_options import LoggerConfig


def root_schema(parts: Any, encoder: type) -> type:
    """The whole config's schema for one modality (its :class:`~poslab.modalities.Modality` record: its
    ``task`` / ``data`` / ``model`` / ``eval`` schemas) and one encoder's schema."""
    return make_dataclass(
        "Config",
        [
            ("modality", str, MISSING),
            *((key, list[str], field(default_factory=list)) for key in ("positions", "offers")),  # the modality's YAML
            ("experiment", Optional[str], MISSING),
            ("seed", Annotated[int, SEED], MISSING),
            ("expect", list[str], field(default_factory=list)),
            ("compare_encoders", list[str], field(default_factory=list)),
            ("compare_experiment", Optional[str], None),
            ("compare_seeds", Annotated[int, AT_LEAST_1], MISSING),
            ("compare_variants", dict[str, list[str]], field(default_factory=dict)),
            ("encoder_options", dict[str, dict[str, Any]], field(default_factory=dict)),  # name -> its options
            ("variant", Optional[str], None),
            ("resume", Optional[str], None),
            ("task", parts.task, field(default_factory=parts.task)),
            ("encoder", encoder, field(default_factory=encoder)),
            ("data", parts.data, field(default_factory=parts.data)),
            ("model", parts.model, field(default_factory=parts.model)),
            ("optim", dict[str, Any], field(default_factory=dict)),  # typed by the optimiser's signature, sparse
            ("sched", dict[str, Any], field(default_factory=dict)),  # typed by the schedule's, sparse
            ("callbacks", list[Any], field(default_factory=list)),  # presets: poslab.run.presets
            ("checkpoint", dict[str, Any], field(default_factory=dict)),  # typed by ModelCheckpoint's, sparse
            ("trainer", dict[str, Any], field(default_factory=dict)),  # typed by lightning.Trainer's, sparse
            ("logger", LoggerConfig, field(default_factory=LoggerConfig)),
            ("run", RunConfig, field(default_factory=RunConfig)),
            ("eval", parts.eval, field(default_factory=parts.eval)),
        ],
    )
