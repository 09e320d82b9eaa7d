"""Options declared once, in a constructor's signature, with their types and defaults.

An encoder's or a model's options are the keyword parameters of its
constructor, minus those the code supplies (the encoder, sizes the data
reports). The config schema (:func:`options_schema`: key, type, default) and
the call (:func:`pick_options`: the config's values for exactly those keys)
both derive from the signature, so an option is added by adding a parameter;
the YAML only sets values.
"""

from __future__ import annotations

import enum
import inspect
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import field, make_dataclass
from typing import Any, Literal, Optional, Union

from omegaconf import MISSING

from poslab.config.ranges import with_ranges


def keyword_options(fn: Callable, supplied: tuple[str, ...] = ()) -> dict[str, inspect.Parameter]:
    """The parameters of ``fn`` (a class: its ``__init__``) a config sets: all but ``self``, ``*args`` /
    ``**kwargs`` and the ``supplied`` ones."""
    target = fn.__init__ if isinstance(fn, type) else fn
    params = inspect.signature(target).parameters
    skipped = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    return {k: p for k, p in params.items() if k != "self" and k not in supplied and p.kind not in skipped}


def option_fields(fn: Callable, supplied: tuple[str, ...] = ()) -> list[tuple[str, Any, Any]]:
    """``(key, type, dataclass field)`` per option, string annotations evaluated (a declared range kept:
    ``Annotated[int, AT_LEAST_1]``, :mod:`poslab.config.ranges`); no default: required."""
    target = fn.__init__ if isinstance(fn, type) else fn
    hints = typing.get_type_hints(target, include_extras=True)
    out = []
    for key, param in keyword_options(fn, supplied).items():
        default = MISSING if param.default is inspect.Parameter.empty else param.default
        out.append((key, normalise(hints.get(key, Any)), field(default=default)))
    return out


def options_schema(name: str, fn: Callable, supplied: tuple[str, ...] = (), bases: tuple[type, ...] = ()) -> type:
    """A dataclass of ``fn``'s options (on top of ``bases``' fields), for OmegaConf's validation; it remembers
    where it came from (``options_of``, ``supplied``)."""
    schema = make_dataclass(name, option_fields(fn, supplied), bases=bases)
    schema.options_of, schema.supplied = fn, supplied
    return schema


def signature_schema(
    name: str,
    fn: Callable,
    skip: tuple[str, ...] = (),
    leading: list | tuple = (),
    defaults: Mapping | None = None,
    ranges: Mapping | None = None,
) -> type:
    """A dataclass of the arguments of ``fn`` a YAML value can hold (:func:`config_type`; the others, and
    ``skip``, are left out), after the ``leading`` ``(key, type, field)`` entries; defaults are ``fn``'s unless
    ``defaults`` overrides them, and ``ranges`` (:mod:`poslab.config.ranges`) declares the ranges a library's
    signature cannot. ``choices`` rides along: the listed values of ``Literal`` arguments."""

    target = fn.__init__ if isinstance(fn, type) else fn
    hints = typing.get_type_hints(target)
    fields_, choices = list(leading), {}
    for key, param in keyword_options(fn, skip).items():
        held = config_type(hints.get(key, Any))
        if held is None:
            continue
        default = (defaults or {}).get(key, MISSING if param.default is inspect.Parameter.empty else param.default)
        default = plain_default(default)
        fields_.append((key, with_ranges(held, key, ranges or {}), field(default=default)))
        listed = literal_choices(hints.get(key, Any))
        if listed:
            choices[key] = listed
    schema = make_dataclass(name, fields_)
    schema.choices = choices
    return schema


def plain_default(value: Any) -> Any:
    """A default as a YAML value: an enum's value, an object (``torch.device('cpu')``) as its string."""

    if isinstance(value, enum.Enum):
        return value.value
    if value is MISSING or value is None or isinstance(value, (*SCALARS, list, tuple, dict)):
        return value
    return str(value)


def pick_options(fn: Callable, values: Mapping[str, Any], supplied: tuple[str, ...] = ()) -> dict[str, Any]:
    """The entries of ``values`` that are options of ``fn`` (a config node also holds keys other code reads)."""
    options = keyword_options(fn, supplied)
    return {k: v for k, v in values.items() if k in options}


#: The scalar types a config value can hold.
SCALARS = (bool, int, float, str)


def union_members(annotation: Any) -> tuple:
    """``A | B`` -> ``(A, B)``; anything else -> ``(annotation,)``."""
    is_union = typing.get_origin(annotation) in (Union, types.UnionType)
    return typing.get_args(annotation) if is_union else (annotation,)


def config_type(annotation: Any) -> Any:
    """What a config key can hold of a parameter's annotation: its scalar and container members (a
    ``Literal``'s values as their types; objects, callables and durations dropped, as a YAML value cannot
    be one); ``Any`` when containers and scalars mix (OmegaConf's unions take scalars only), ``None`` when
    nothing is left (the argument takes objects only)."""
    members = union_members(annotation)
    scalars: list[type] = []
    containers, optional = [], False
    for member in members:
        origin = typing.get_origin(member)
        if member is type(None):
            optional = True
        elif origin is Literal:
            scalars += [type(v) for v in typing.get_args(member) if v is not None]
            optional |= None in typing.get_args(member)
        elif origin in (list, dict, tuple):
            inner = [a if a is Ellipsis else config_type(a) for a in typing.get_args(member)]
            if None not in inner:  # a list of objects cannot be written in YAML either
                containers.append(origin[tuple(inner)] if inner else member)
        elif member is Any:
            return Any
        elif member in SCALARS:
            scalars.append(member)
    held = [t for t in SCALARS if t in scalars]  # a fixed order: bool before int, as OmegaConf tries them
    if containers and held or len(containers) > 1:
        return Any
    if not held and not containers:
        return None
    core = containers[0] if containers else (held[0] if len(held) == 1 else Union[tuple(held)])
    return Optional[core] if optional else core


def literal_choices(annotation: Any) -> tuple | None:
    """The values a parameter accepts when its annotation lists them all (``Literal`` members, ``None``)."""
    members = union_members(annotation)
    choices: list = []
    for member in members:
        if typing.get_origin(member) is Literal:
            choices += typing.get_args(member)
        elif member is type(None):
            choices.append(None)
        else:
            return None
    return tuple(choices) or None


def normalise(annotation: Any) -> Any:
    """``X | None`` (types.UnionType) -> ``typing.Union`` that OmegaConf understands, also inside ``Annotated``."""
    if typing.get_origin(annotation) is typing.Annotated:
        bare, *extras = typing.get_args(annotation)
        return typing.Annotated.__class_getitem__((normalise(bare), *extras))
    if isinstance(annotation, types.UnionType):
        return Union[tuple(normalise(a) for a in annotation.__args__)]
    return annotation
