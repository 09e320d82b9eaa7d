"""Structured schemas of the resolved config: the keys, their types and, for options, their defaults.

An option is declared once, with its type and default: encoder and model
options in their constructors (:func:`encoder_schema`, a modality's
``options_schema``), a modality's ``task`` / ``data`` / ``eval`` options in its
``schema.py``, the logger's and the shared ``model`` / ``eval`` keys here. The
YAML files set other values. The run settings that every modality and trainer
preset tunes (``run``, ``trainer``, ``optim``) keep their values in
``configs/train.yaml`` and the presets, and are typed here only (MISSING).
OmegaConf rejects an unknown key or a wrong type with the key's full name.
"""

from __future__ import annotations

from dataclasses import dataclass, field, make_dataclass
from typing import Annotated, Any, Literal, Optional, Union

from omegaconf import MISSING

from poslab.config.blocks import EvalConfig, ModelConfig  # noqa: F401  (re-exported: modalities extend them)
from poslab.config.options import option_fields
from poslab.config.ranges import AT_LEAST_0, AT_LEAST_1, FRACTION, POSITIVE, SEED, Range  # noqa: F401  (re-exported)
from poslab.config.trainer import trainer_schema

Number = Union[int, float]


#: A run name is one path component of at most this many characters.
RUN_NAME_MAX = 120


@dataclass
class RunConfig:
    root: str = MISSING
    name: Optional[str] = MISSING
    checkpoint_every_n_steps: Annotated[Optional[int], AT_LEAST_1] = None


#: Nodes typed by a signature and kept sparse: a config holds the keys it sets, checked against the schema
#: the function returns for the node; every other key keeps the signature's default where it is used.
SIGNATURE_NODES: dict[str, Any] = {
    "trainer": lambda node: _trainer_schema(),
    "optim": lambda node: _optimizer_schema(node.get("name", "adamw")),
    "sched": lambda node: SchedConfig,
}


def _trainer_schema() -> type:

    return trainer_schema()


def _optimizer_schema(name: str) -> type:
    from poslab.tasks.optimizers import optimizer_schema

    return optimizer_schema(name)


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
    log_model: bool = False  # upload checkpoints as W&B artifacts (online only)


@dataclass
class SchedConfig:
    """The learning-rate schedule, stepped per batch after ``optim.warmup_fraction`` of linear warmup
    (:data:`poslab.tasks.optimizers.SCHEDULES`); one-cycle is torch's ``OneCycleLR``."""

    name: Literal["one_cycle", "constant", "cosine", "linear"] = "one_cycle"


def encoder_schema(name: str) -> type:
    """A dataclass for ``encoder.*``: ``name`` plus the constructor's typed options.

    A composite (``rope+calendar``) or per-layer pattern (``rope,none``) gets one nested block per member.
    """
    from poslab.encoders.registry import is_combination, members_of

    fields_: list = [("name", Literal[name], MISSING)]  # type: ignore[valid-type]
    if is_combination(name):
        for member in members_of(name):
            block = _options_schema(member)
            fields_.append((member, block, field(default_factory=block)))
    else:
        fields_ += _option_fields(name)
    return make_dataclass("Encoder_" + "".join(c if c.isalnum() else "_" for c in name), fields_)


def _options_schema(name: str) -> type:
    return make_dataclass(f"Options_{name}", _option_fields(name))


def _option_fields(name: str) -> list:
    """(key, type, default) of an encoder's options: its constructor minus what the backbone supplies."""
    from poslab.encoders import encoder_class
    from poslab.encoders.registry import STRUCTURAL_ARGS

    return option_fields(encoder_class(name), supplied=STRUCTURAL_ARGS)


def root_schema(parts: Any, encoder: type) -> type:
    """The whole config's schema for one modality (its :class:`~poslab.modalities.Modality` record:
    its ``task`` / ``data`` / ``model`` / ``eval`` schemas) and one encoder's schema."""
    return make_dataclass(
        "Config",
        [
            ("modality", str, MISSING),
            ("positions", list[str], field(default_factory=list)),  # set by the modality's YAML
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
            ("optim", dict[str, Any], field(default_factory=dict)),  # typed by optimizer_schema(name), sparse
            ("sched", dict[str, Any], field(default_factory=dict)),  # typed by SchedConfig, sparse
            ("callbacks", list[Any], field(default_factory=list)),  # presets: poslab.config.presets
            ("trainer", dict[str, Any], field(default_factory=dict)),  # typed by trainer_schema(), sparse
            ("logger", LoggerConfig, field(default_factory=LoggerConfig)),
            ("run", RunConfig, field(default_factory=RunConfig)),
            ("eval", parts.eval, field(default_factory=parts.eval)),
        ],
    )
