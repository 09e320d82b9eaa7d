"""Encoder registry: every module in ``poslab.encoders`` registers itself.

Adding an encoder = one module here (decorated with :func:`register_encoder`); its options are its
constructor's, so ``configs/encoder/<name>.yaml`` exists only where a default differs. Discovery imports
every module of the package, so nothing else has to list it.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
from collections.abc import Callable
from dataclasses import field, make_dataclass
from typing import Any, Literal

from omegaconf import MISSING

from poslab import entry_points
from poslab.config.checks import check_block
from poslab.config.files import group_choices, modality_positions
from poslab.config.options import keyword_options, signature_schema
from poslab.encoders.base import PositionEncoder
from poslab.encoders.composite import CompositeEncoder
from poslab.encoders.layered import LayeredEncoder
from poslab.errors import ConfigError, did_you_mean

_REGISTRY: dict[str, type[PositionEncoder]] = {}
_DISCOVERED = False
# Constructor arguments the backbone supplies; everything else is an option.
STRUCTURAL_ARGS = ("dim", "num_heads")


def register_encoder(name: str) -> Callable[[type[PositionEncoder]], type[PositionEncoder]]:
    """Class decorator: make an encoder available under ``name``."""

    def wrap(cls: type[PositionEncoder]) -> type[PositionEncoder]:
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise RuntimeError(f"encoder name '{name}' registered twice")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return wrap


def _discover() -> None:
    global _DISCOVERED
    if _DISCOVERED:
        return
    package = importlib.import_module("poslab.encoders")
    for info in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"poslab.encoders.{info.name}")
    _DISCOVERED = True
    entry_points.load("poslab.encoders")  # installed plugins' encoders, after the built-in ones


def available_encoders(modality: str | None = None) -> list[str]:
    """Registered encoder names, optionally only those fitting ``modality``."""
    _discover()
    return sorted(n for n, cls in _REGISTRY.items() if modality is None or fits(cls, modality))


def fits(cls: type[PositionEncoder], modality: str) -> bool:
    """Whether the encoder fits ``modality``: its data provides the position field the encoder reads, its
    training what the encoder needs."""
    return cls.fits(modality_positions(modality), modality_positions(modality, "offers"))


#: ``rope+calendar``: a composite of registered encoders, applied in that order.
SEPARATOR = "+"
#: ``rope,rope,rope,none``: registered encoders per layer, cycled over the depth.
LAYER_SEPARATOR = ","


def is_combination(name: str) -> bool:
    """A composite (``a+b``) or a per-layer pattern (``a,a,b``): built from members, not registered."""
    return SEPARATOR in name or LAYER_SEPARATOR in name


def members_of(name: str) -> list[str]:
    """The distinct member names of a composite or per-layer name, in order (one name for a plain encoder)."""
    if LAYER_SEPARATOR in name:
        return list(dict.fromkeys(name.split(LAYER_SEPARATOR)))
    return name.split(SEPARATOR)


def _combine(name: str, dim: int, num_heads: int, members: dict[str, PositionEncoder]) -> PositionEncoder:
    if LAYER_SEPARATOR in name:
        return LayeredEncoder(dim, num_heads, members, name.split(LAYER_SEPARATOR))
    return encoder_class(name)(dim=dim, num_heads=num_heads, members=members)


def encoder_class(name: str, modality: str | None = None) -> type[PositionEncoder]:
    """The class registered as ``name``; a clear error for unknown / unfit names."""
    _discover()
    if not isinstance(name, str):
        raise ConfigError(
            f"encoder.name must be an encoder's name, got {name!r}; valid: {', '.join(available_encoders())}"
        )
    if LAYER_SEPARATOR in name:
        layers = name.split(LAYER_SEPARATOR)
        if "" in layers or SEPARATOR in name:
            raise ConfigError(
                f"encoder '{name}': a per-layer pattern lists registered encoders joined by '{LAYER_SEPARATOR}' "
                f"(no composites inside it)"
            )
        for member in members_of(name):
            encoder_class(member, modality)

        return LayeredEncoder
    if SEPARATOR in name:
        members = members_of(name)
        if len(set(members)) != len(members) or "" in members:
            raise ConfigError(f"encoder '{name}': a composite lists distinct encoders joined by '{SEPARATOR}'")
        for member in members:
            encoder_class(member, modality)

        return CompositeEncoder
    if name not in _REGISTRY:
        valid = available_encoders(modality)
        raise ConfigError(
            f"unknown encoder '{name}'{did_you_mean(name, valid)}; valid"
            f"{' for ' + modality if modality else ''}: {', '.join(valid)}"
        )
    cls = _REGISTRY[name]
    if modality is not None and not fits(cls, modality):
        fitting = [m for m in group_choices("modality") if fits(cls, m)]
        raise ConfigError(
            f"encoder '{name}' does not fit modality '{modality}' (it reads positions.{cls.reads}"
            f"{''.join(f', needs {n}' for n in cls.needs)}: it fits "
            f"{', '.join(fitting) or 'no modality'}); encoders for {modality}: "
            f"{', '.join(available_encoders(modality))}"
        )
    return cls


def encoder_options(name: str) -> dict[str, inspect.Parameter]:
    """The keyword options of an encoder: its constructor minus dim / num_heads.

    A composite's or per-layer pattern's options are one mapping per member, named after it.
    """
    if is_combination(name):
        encoder_class(name)
        kind = inspect.Parameter.KEYWORD_ONLY
        return {m: inspect.Parameter(m, kind, default=None, annotation=dict) for m in members_of(name)}
    return keyword_options(encoder_class(name), supplied=STRUCTURAL_ARGS)


def encoder_schema(name: str) -> type:
    """``encoder.*``: ``name`` plus the constructor's options, typed and with their defaults (the one builder,
    :func:`~poslab.config.options.signature_schema`); a composite (``rope+calendar``) or per-layer pattern
    (``rope,none``) gets one block per member, named after it."""
    leading = [("name", Literal[name], field(default=MISSING))]
    if not is_combination(name):
        return signature_schema(f"Encoder_{name}", encoder_class(name), STRUCTURAL_ARGS, leading=leading)
    for member in members_of(name):
        block = signature_schema(f"Options_{member}", encoder_class(member), STRUCTURAL_ARGS)
        leading.append((member, block, field(default_factory=block)))
    return make_dataclass("Encoder_" + "".join(c if c.isalnum() else "_" for c in name), leading)


def build_encoder(name: str, *, dim: int, num_heads: int, **options: Any) -> PositionEncoder:
    """Instantiate a registered encoder, its options checked as a config's are: an unknown option, a wrong
    type or a value outside its declared range is one :class:`ConfigError` line."""
    valid = encoder_options(name)
    for key in options:
        if key not in valid:
            raise ConfigError(
                f"encoder '{name}' has no option '{key}'{did_you_mean(key, valid)}; "
                f"options: {', '.join(valid) or 'none'}"
            )
    schema = encoder_schema(name)
    checked = check_block(options, schema, "", lambda key: f"{name}: {key}", sparse=True)
    return _construct(name, dim, num_heads, checked)


def _construct(name: str, dim: int, num_heads: int, options: dict[str, Any]) -> PositionEncoder:
    """The encoder from options already checked (a composed config's, or :func:`build_encoder`'s)."""
    if is_combination(name):
        members = {m: _construct(m, dim, num_heads, dict(options.get(m) or {})) for m in members_of(name)}
        return _combine(name, dim, num_heads, members)
    try:
        return encoder_class(name)(dim=dim, num_heads=num_heads, **options)
    except (ValueError, TypeError) as exc:  # an encoder's own check of its options: one line, as a ConfigError
        text = " ".join(str(exc).split()) or type(exc).__name__
        raise ConfigError(f"encoder '{name}': {text}") from None


def encoder_defaults(name: str) -> dict[str, Any]:
    """The options an encoder's constructor gives a default (its YAML states the same values)."""
    return {k: p.default for k, p in encoder_options(name).items() if p.default is not p.empty}


def build_encoder_in_context(
    name: str, *, dim: int, num_heads: int, options: dict[str, Any], context: dict[str, Any]
) -> PositionEncoder:
    """Build from a composed config's options (checked when it was composed), with facts the data knows
    (``grid_size``, ``max_len``…) filling the options left ``None``: the encoder does not need to know where
    they come from."""
    if is_combination(name):
        members = {
            m: build_encoder_in_context(
                m, dim=dim, num_heads=num_heads, options=dict(options.get(m) or {}), context=context
            )
            for m in members_of(name)
        }
        return _combine(name, dim, num_heads, members)
    accepted = encoder_options(name)
    filled = dict(options)
    for key, value in context.items():
        if key in accepted and filled.get(key) is None:
            filled[key] = value
    return _construct(name, dim, num_heads, filled)


def encoder_tuning(encoder: str, options: Any) -> dict[str, Any]:
    """The ``encoder.*`` values ``encoder_options`` (encoder name -> its options) gives ``encoder``: its own
    entry, or one per member of a composite or per-layer pattern (under the member's block). A name that is
    no encoder, an option that none of its encoder has, or options that are not a mapping, is one line."""
    if not isinstance(options, dict) or not all(isinstance(v, dict) for v in options.values()):
        raise ConfigError(f"encoder_options must map encoder names to their options, got {options!r}")
    known = available_encoders()
    for name, given in options.items():
        if name not in known:
            raise ConfigError(f"encoder_options names no encoder '{name}'{did_you_mean(name, known)}")
        valid = [f.name for f in dataclasses.fields(encoder_schema(name)) if f.name != "name"]
        for key in set(given) - set(valid):  # checked whichever encoder runs: a typo for another one is found too
            raise ConfigError(f"unknown config key 'encoder_options.{name}.{key}'{did_you_mean(key, valid)}; "
                              f"{name}'s options: {', '.join(valid) or 'none'}")  # fmt: skip
    if is_combination(encoder):
        return {member: options[member] for member in members_of(encoder) if member in options}
    return dict(options.get(encoder, {}))
