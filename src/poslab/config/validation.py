"""Each part of a composed config's schema, and the checks across keys: ``trainer``, ``optim``, ``sched``,
``checkpoint`` and callback presets typed from their signatures, sparse (the rest keep the library's defaults)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from poslab.config.checks import check, check_block, config_key
from poslab.config.root import root_schema
from poslab.encoders.registry import encoder_class, encoder_schema
from poslab.errors import ConfigError
from poslab.modalities.registry import get_modality
from poslab.run.presets import check_logger, checkpoint_schema, entries, preset_schema
from poslab.run.rundir import check_run
from poslab.run.trainer_options import trainer_schema
from poslab.tasks.optimizers import DEFAULT_OPTIMIZER, DEFAULT_SCHEDULE, optimizer_schema, sched_schema

#: Nodes typed by a signature and kept sparse, and the schema of each (from the node: the optimiser it names).
SIGNATURE_NODES: dict[str, Callable[[Mapping], type]] = {
    "trainer": lambda node: trainer_schema(),
    "optim": lambda node: optimizer_schema(node.get("name", DEFAULT_OPTIMIZER)),
    "sched": lambda node: sched_schema(node.get("name", DEFAULT_SCHEDULE)),
    "checkpoint": checkpoint_schema,
}


def validate(cfg: DictConfig) -> DictConfig:
    """``cfg`` checked once (:mod:`~poslab.config.checks`), and the rules across keys; typed, defaults filled."""
    parts = get_modality(cfg.get("modality"))  # an unknown modality: one line naming the valid ones
    encoder_class(OmegaConf.select(cfg, "encoder.name"), cfg.modality)
    try:
        given = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)
    except OmegaConfBaseException as exc:
        raise ConfigError(f"invalid config at '{exc.full_key}': {exc.msg.splitlines()[0]}") from None
    sparse = {name: given.pop(name, None) or {} for name in SIGNATURE_NODES}
    callbacks = given.pop("callbacks", None) or []
    checked = check_block(given, root_schema(parts, encoder_schema(cfg.encoder.name)), "", config_key)
    schemas = {name: of(sparse[name]) for name, of in SIGNATURE_NODES.items()}
    for name, schema in schemas.items():
        checked[name] = check_block(sparse[name], schema, f"{name}.", config_key, sparse=True)
    checked["callbacks"] = [
        {preset: typed} if (typed := check_block(options, preset_schema(preset), f"callbacks.{preset}.", config_key,
                                                 sparse=True)) else preset
        for preset, options in entries(callbacks)
    ]  # fmt: skip
    check_logger(checked["callbacks"], checked["logger"])
    for key, allowed in parts.ranges.items():  # the deprecated Modality(ranges=...) table
        check(OmegaConf.select(OmegaConf.create(checked), key), Annotated[Any, allowed], key, config_key)
    check_run(checked["run"])
    for name, schema in schemas.items():
        if hasattr(schema, "check"):  # what holds between a node's keys
            schema.check(checked[name])
    typed = OmegaConf.create(checked)
    problem = parts.check(typed) if parts.check else None
    if problem:
        raise ConfigError(problem)
    return typed
