"""The table of every config key, its type (and range), its declared default and its value: what
``poslab train --options`` prints and the docs' option tables carry, read from the schemas the config is checked
against."""

from __future__ import annotations

import dataclasses
import typing
from typing import Annotated

from omegaconf import DictConfig, ListConfig, OmegaConf

from poslab.config.checks import declared_default, describe_type
from poslab.config.ranges import range_of
from poslab.config.validation import SIGNATURE_NODES, root_schema
from poslab.encoders.registry import encoder_schema
from poslab.modalities.registry import get_modality


def option_rows(cfg: DictConfig) -> list[tuple[str, str, str, str]]:
    """``(key, type, default, value)`` of every key ``cfg``'s schema declares (``poslab train --options``)."""
    import lightning.pytorch  # noqa: F401  deferred: Lightning, ~7 s: checkpoint.* is ModelCheckpoint's signature

    rows = []

    def walk(schema: type, prefix: str) -> None:
        hints = typing.get_type_hints(schema, include_extras=True)
        for spec in dataclasses.fields(schema):
            key, hint = f"{prefix}{spec.name}", hints[spec.name]
            bare = typing.get_args(hint)[0] if typing.get_origin(hint) is Annotated else hint
            if key in SIGNATURE_NODES:  # every key its signature declares
                walk(SIGNATURE_NODES[key](cfg[key]), f"{key}.")
                continue
            if dataclasses.is_dataclass(bare):
                walk(bare, f"{key}.")
                continue
            declared = declared_default(spec)
            if dataclasses.is_dataclass(declared):
                declared = dataclasses.asdict(declared)
            value = OmegaConf.select(cfg, key, default=declared, throw_on_missing=False)
            value = OmegaConf.to_container(value) if isinstance(value, (DictConfig, ListConfig)) else value
            allowed = range_of(hint)
            each = "each " if typing.get_origin(bare) in (list, tuple) else ""
            kind = describe_type(bare) + (f", {each}{allowed.describe()}" if allowed else "")
            default = "—" if declared is dataclasses.MISSING else repr(declared)  # "—": the YAML's value only
            rows.append((key, kind, default, repr(value)))

    walk(root_schema(get_modality(cfg.modality), encoder_schema(cfg.encoder.name)), "")
    return rows
