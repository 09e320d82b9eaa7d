"""Options declared once, in a signature: an encoder's, a model's, an optimiser's, a callback preset's and
``lightning.Trainer``'s options are the keyword parameters of its constructor, minus those the code supplies.
:func:`signature_schema` is the one builder that turns a signature into the schema a config is checked against;
:func:`pick_options` hands the config's values for those keys back to the call. The YAML only sets values."""

from __future__ import annotations

import dataclasses
import enum
import inspect
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Annotated, Any, Literal, Optional, Union

from omegaconf import MISSING

from poslab.config.ranges import Range

SCALARS = (bool, int, float, str)  # the scalar types a config value can hold
LISTS = (list, Iterable, Sequence)  # written in YAML as a list (torch's MultiStepLR takes Iterable[int] milestones)
#: Names a library's annotations may use while importing them for type checkers only (torch's schedulers do).
ANNOTATION_NAMES = {"Iterable": Iterable, "Sequence": Sequence, "Callable": Callable, "Mapping": Mapping}


def keyword_options(fn: Callable, supplied: tuple[str, ...] = ()) -> dict[str, inspect.Parameter]:
    """The parameters of ``fn`` (a class: its ``__init__``) a config sets: all but ``self``, ``*args`` /
    ``**kwargs`` and the ``supplied`` ones."""
    params = inspect.signature(fn.__init__ if isinstance(fn, type) else fn).parameters
    skipped = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    return {k: p for k, p in params.items() if k != "self" and k not in supplied and p.kind not in skipped}


def pick_options(fn: Callable, values: Mapping[str, Any], supplied: tuple[str, ...] = ()) -> dict[str, Any]:
    """The entries of ``values`` that are options of ``fn`` (a config node also holds keys other code reads)."""
    return {k: values[k] for k in keyword_options(fn, supplied) if k in values}


def signature_schema(
    name: str,
    fn: Callable,
    skip: tuple[str, ...] = (),
    *,
    leading: list | tuple = (),
    defaults: Mapping[str, Any] | None = None,
    ranges: Mapping[str, Range] | None = None,
    bases: tuple[type, ...] = (),
) -> type:
    """A dataclass of the options of ``fn`` a YAML value can hold (:func:`config_type`; the others and ``skip``
    left out), after the ``leading`` ``(key, type, field)`` entries and ``bases``' fields. Defaults are ``fn``'s
    unless ``defaults`` overrides one (none: required); ``ranges`` declares what a library's signature cannot."""
    target = fn.__init__ if isinstance(fn, type) else fn
    hints = typing.get_type_hints(target, include_extras=True, localns=ANNOTATION_NAMES)
    fields_ = list(leading)
    for key, param in keyword_options(fn, skip).items():
        held = config_type(hints.get(key, Any))
        if held is None:
            continue
        default = (defaults or {}).get(key, MISSING if param.default is inspect.Parameter.empty else param.default)
        if key in (ranges or {}):
            held = Annotated[held, ranges[key]]
        fields_.append((key, held, dataclasses.field(default=plain_default(default))))
    schema = dataclasses.make_dataclass(name, fields_, bases=bases)
    schema.options_of, schema.supplied = fn, skip
    return schema


def options_schema(name: str, fn: Callable, supplied: tuple[str, ...] = (), bases: tuple[type, ...] = ()) -> type:
    """A model's ``model.*`` schema: its constructor's options on ``bases`` (``ModelConfig``)."""
    return signature_schema(name, fn, supplied, bases=bases)


def plain_default(value: Any) -> Any:
    """A default as a YAML value: an enum's value, an object (``torch.device('cpu')``) as its string."""
    if isinstance(value, enum.Enum):
        return value.value
    plain = value is MISSING or value is None or isinstance(value, (*SCALARS, list, tuple, dict))
    return value if plain or dataclasses.is_dataclass(value) else str(value)


def config_type(annotation: Any) -> Any:
    """What a config key can hold of an annotation: its scalar, listed (``Literal``s merged), container and option-
    block (dataclass) members, ranges kept; objects dropped, as YAML cannot hold one (``None`` when none is left)."""
    if typing.get_origin(annotation) is Annotated:
        bare, *extras = typing.get_args(annotation)
        held = config_type(bare)
        return None if held is None else Annotated[(held, *extras)]
    kept, listed, optional = [], [], False
    union = typing.get_origin(annotation) in (Union, types.UnionType)
    for member in typing.get_args(annotation) if union else (annotation,):
        origin = typing.get_origin(member)
        if member is Any:
            return Any
        if member is type(None):
            optional = True
        elif origin is Literal:
            listed += [v for v in typing.get_args(member) if v is not None]
            optional |= None in typing.get_args(member)
        elif member in SCALARS or dataclasses.is_dataclass(member) or origin is Annotated:
            kept.append(config_type(member) if origin is Annotated else member)
        elif origin in (*LISTS, dict, tuple):
            inner = [a if a is Ellipsis else config_type(a) for a in typing.get_args(member)]
            if None not in inner:  # a list of objects cannot be written in YAML either
                kept.append((list if origin in LISTS else origin)[tuple(inner)] if inner else member)
    kept.sort(key=lambda m: SCALARS.index(m) if m in SCALARS else len(SCALARS))  # bool before int, as OmegaConf
    if listed and str not in kept:  # a listed string next to any string is any string
        kept.insert(0, Literal[tuple(dict.fromkeys(listed))])
    if not kept:
        return None
    core = kept[0] if len(kept) == 1 else Union[tuple(kept)]
    return Optional[core] if optional else core
