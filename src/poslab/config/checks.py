"""A value checked against its declared type and range (converted as OmegaConf converts YAML values), a block of
options (a dataclass) key by key: one line naming the key for anything wrong. A composed config is checked here
once, and so are the options :func:`poslab.encoders.build_encoder` is given. Hand-written: OmegaConf's structured
merge reads no ranges, names no key in several of its errors, and turning them into one line each took as much
code again (docs/configuration.md, "Why not Hydra")."""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal, Union

from poslab.config.ranges import range_of
from poslab.errors import ConfigError, did_you_mean

Namer = Callable[[str], str]  # how a message names a key: ``config key 'model.dim'``, ``rope: base`` (in code)


def config_key(key: str) -> str:
    return f"config key '{key}'"


def check_block(node: Any, schema: type, prefix: str, name: Namer, sparse: bool = False) -> dict[str, Any]:
    """A mapping checked against the dataclass ``schema``: an unknown key (with the closest valid one), a key
    poslab sets (``owned``), a missing or bad value is one line. ``sparse`` keeps the keys given (less those of
    another choice, ``foreign``), in their order; else every field, defaults filled in."""
    if not isinstance(node, Mapping):
        raise ConfigError(f"{name(prefix.rstrip('.'))} expects a mapping, got {node!r}")
    hints = typing.get_type_hints(schema, include_extras=True)
    fields = {f.name: f for f in dataclasses.fields(schema)}
    owned, foreign = getattr(schema, "owned", {}), getattr(schema, "foreign", set())
    for key in node:
        if key in owned:
            raise ConfigError(f"'{prefix}{key}' is not a config key: it is set by {owned[key]}")
        if key not in fields and key not in foreign:
            valid = [f"{prefix}{k}" for k in fields]
            raise ConfigError(f"unknown config key '{prefix}{key}'{did_you_mean(f'{prefix}{key}', valid)}")
    out = {}
    for key in [k for k in node if k in fields] if sparse else fields:
        if key in node and node[key] != "???":
            out[key] = check(node[key], hints[key], f"{prefix}{key}", name)
        else:
            value = declared_default(fields[key])
            if value is dataclasses.MISSING:
                raise ConfigError(f"{name(prefix + key)} has no value; set it with {prefix}{key}=...")
            out[key] = check(value, hints[key], f"{prefix}{key}", name)
    return out


def check(value: Any, hint: Any, key: str, name: Namer = config_key) -> Any:
    """``value`` as the annotation ``hint`` types it, converted as OmegaConf converts (an int where a float goes,
    a number's text where a number goes, ``yes`` where a bool goes), finite, in the range ``hint`` declares."""
    bare = typing.get_args(hint)[0] if typing.get_origin(hint) is Annotated else hint
    try:
        typed = _typed(value, bare, key, name)
    except _Mismatch:
        members = typing.get_args(bare) if typing.get_origin(bare) is Union else (bare,)
        listed = [str(a) for m in members if typing.get_origin(m) is Literal for a in typing.get_args(m)]
        close = did_you_mean(str(value), listed) if listed and isinstance(value, str) else ""
        raise ConfigError(f"{name(key)} expects {describe_type(bare)}, got {value!r}{close}") from None
    allowed = range_of(hint)
    for item in _leaves(typed):
        if isinstance(item, float) and not math.isfinite(item):
            raise ConfigError(f"{name(key)} must be a finite number, got {item}")
        number = isinstance(item, (int, float)) and not isinstance(item, bool)
        if allowed and number and not allowed.holds(item):
            raise ConfigError(f"{name(key)} must be {allowed.describe()}, got {item!r}")
    return typed


def _leaves(value: Any) -> list:
    if isinstance(value, Mapping):
        value = list(value.values())
    return [leaf for v in value for leaf in _leaves(v)] if isinstance(value, (list, tuple)) else [value]


class _Mismatch(Exception):
    """A value not of its key's type: :func:`check` names the key and the whole type."""


def _typed(value: Any, hint: Any, key: str, name: Namer) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Annotated:
        return _typed(value, args[0], key, name)
    if value is None and (hint is Any or type(None) in args):
        return None
    if hint is Any:
        return value
    if origin is Union:  # OmegaConf's unions take a value as it is (the one member of an Optional converts it)
        members = [m for m in args if m is not type(None)]
        exact = [m for m in members if _is(value, m)]
        if len(members) == 1 or exact:
            return _typed(value, (exact or members)[0], key, name)
    elif origin is Literal:
        if _is(value, hint):
            return value
    elif hint in (int, float, bool, str) and value is not None and not isinstance(value, (dict, list, tuple)):
        converted = _scalar(value, hint)
        if converted is not None:
            return converted
    elif origin in (list, tuple) and isinstance(value, (list, tuple)):
        kinds = args if origin is tuple and Ellipsis not in args else [args[0] if args else Any] * len(value)
        if len(kinds) == len(value):
            return origin(check(v, k, f"{key}[{i}]", name) for i, (v, k) in enumerate(zip(value, kinds, strict=True)))
    elif origin is dict and isinstance(value, Mapping):
        return {k: check(v, args[1] if args else Any, f"{key}.{k}", name) for k, v in value.items()}
    elif dataclasses.is_dataclass(hint) and isinstance(value, Mapping):
        return check_block(value, hint, f"{key}.", name)
    elif dataclasses.is_dataclass(hint) and dataclasses.is_dataclass(value):  # a block's default, as declared
        return check_block(dataclasses.asdict(value), hint, f"{key}.", name)
    raise _Mismatch


def _is(value: Any, member: Any) -> bool:
    """Whether ``value`` is of ``member`` as it is, with no conversion (a listed value: of its own type too)."""
    bare = typing.get_args(member)[0] if typing.get_origin(member) is Annotated else member
    origin = typing.get_origin(bare) or bare
    if origin is Literal:
        return any(type(value) is type(a) and value == a for a in typing.get_args(bare))
    return origin is Any or type(value) is origin or (origin in (list, tuple) and isinstance(value, (list, tuple)))


def _scalar(value: Any, kind: type) -> Any:
    """OmegaConf's conversion of a YAML scalar to ``kind``, or None where it refuses one."""
    if kind is str:
        return str(value)
    if kind is bool:
        if isinstance(value, (bool, int)):
            return bool(value)
        return {"true": True, "yes": True, "on": True, "1": True, "false": False, "no": False, "off": False,
                "0": False}.get(str(value).lower())  # fmt: skip
    if isinstance(value, bool) or (kind is int and isinstance(value, float)):
        return None
    try:
        return kind(value)
    except ValueError:
        return None


def describe_type(annotation: Any) -> str:
    """A type hint as words: ``int or null``, ``one of 'raw', 'rescaled'``, ``a list [int, int]``."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Annotated:
        return describe_type(args[0])
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin is Union:
        parts = [describe_type(a) for a in args if a is not type(None)]
        return " or ".join(parts) + (" or null" if type(None) in args else "")
    if origin is tuple and Ellipsis not in args:
        return "a list [" + ", ".join(describe_type(a) for a in args) + "]"
    if origin in (tuple, list):
        return f"a list of {describe_type(args[0]) if args else 'values'}"
    if dataclasses.is_dataclass(annotation):
        return "a mapping"
    return getattr(annotation, "__name__", str(annotation))


def declared_default(spec: dataclasses.Field) -> Any:
    """A field's declared default (a factory's value), or ``dataclasses.MISSING``: only the YAML sets it."""
    if spec.default_factory is not dataclasses.MISSING:
        return spec.default_factory()
    return dataclasses.MISSING if spec.default in (dataclasses.MISSING, "???") else spec.default
