"""Value ranges, declared where an option is declared: ``Annotated[int, AT_LEAST_1]`` at a dataclass field or a
constructor's parameter.

A range rides in the option's annotation, so the key, its type, its default and its range are one line and a
new option cannot be added without the place for its range in sight. :func:`declared_ranges` collects them from a
schema (OmegaConf reads ``Annotated`` as the bare type); ``poslab.config.composition.check_values`` checks them before
anything is written. Options whose signature is a library's (``lightning.Trainer``, ``torch.optim``) declare
their ranges beside the schema built from it (:func:`with_ranges`).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Optional, Union

from poslab.errors import ConfigError


@dataclass(frozen=True)
class Range:
    """The values a numeric key may take (``None``: unbounded on that side); a list is checked item by item,
    ``None`` passes where the type allows it."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    also: tuple[float, ...] = ()  # values allowed outside the interval (-1: Lightning's "no limit")

    def holds(self, value: float) -> bool:
        if value in self.also:
            return True
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return False
        return self.high is None or not (value > self.high or (self.high_open and value == self.high))

    def describe(self) -> str:
        def show(x: float) -> str:
            return f"{int(x):,}" if float(x).is_integer() else f"{x:g}"

        if self.high is None:
            text = f"{'>' if self.low_open else '>='} {show(self.low)}"
        elif self.low is None:
            text = f"{'<' if self.high_open else '<='} {show(self.high)}"
        else:
            text = (
                f"in {'(' if self.low_open else '['}{show(self.low)}, {show(self.high)}{')' if self.high_open else ']'}"
            )
        return text + "".join(f" or {show(x)}" for x in self.also)


AT_LEAST_1, AT_LEAST_0, POSITIVE = Range(1), Range(0), Range(0, low_open=True)
FRACTION = Range(0, 1, high_open=True)  # [0, 1)
SEED = Range(0, 2**32 - 1)  # what NumPy's seeding accepts
UNIT = Range(0, 1, low_open=True)  # (0, 1]

# Annotations for the common cases, so a signature line stays short.
Count = Annotated[int, AT_LEAST_1]
OptionalCount = Annotated[Optional[int], AT_LEAST_1]  # None: derived from the data or the model
OptionalGrid = Annotated[Optional[tuple[int, int]], AT_LEAST_1]  # (rows, cols), each >= 1
Positive = Annotated[float, POSITIVE]
NonNegative = Annotated[float, AT_LEAST_0]
PartOf1 = Annotated[float, UNIT]
ZeroToOne = Annotated[float, Range(0, 1)]
#: A rotary / sinusoidal base (theta, the temperature): the wavelengths grow geometrically from 2*pi when it is
#: above 1 (Vaswani et al. 2017, sec. 3.5; Su et al. 2021, eq. 15); at or below 1 they do not.
Base = Annotated[float, Range(1, low_open=True)]

# The shared model sizes, one alias each so every modality's model declares the same bounds. The upper bounds
# lie far past what this template trains, below what fails slowly: a model of 10^9 layers would be built one
# small block at a time until the machine runs out of memory (one huge tensor fails at once).
Width = Annotated[int, Range(1, 2**16)]
Depth = Annotated[int, Range(1, 1024)]
Heads = Annotated[int, Range(1, 1024)]
MlpRatio = Annotated[float, Range(0, 64, low_open=True)]
Dropout = Annotated[float, FRACTION]


def range_of(annotation: Any) -> Range | None:
    """The :class:`Range` an annotation carries (``Annotated[int, R]``, also inside ``Optional``), if any."""
    for member in _members(annotation):
        found = [m for m in getattr(member, "__metadata__", ()) if isinstance(m, Range)]
        if found:
            return found[0]
    return None


def declared_ranges(schema: type, prefix: str = "") -> Iterator[tuple[str, Range]]:
    """``(dotted key, range)`` of every field of the dataclass ``schema`` that declares one, nested blocks
    (a dataclass-typed field, optional or not) under their key."""
    hints = typing.get_type_hints(schema, include_extras=True)
    for spec in dataclasses.fields(schema):
        annotation = hints.get(spec.name, spec.type)
        found = range_of(annotation)
        if found is not None:
            yield f"{prefix}{spec.name}", found
        for member in _members(annotation):
            bare = typing.get_origin(member) is Annotated and typing.get_args(member)[0] or member
            if dataclasses.is_dataclass(bare):
                yield from declared_ranges(bare, f"{prefix}{spec.name}.")


def checked_init(init: Callable) -> Callable:
    """``init`` (a constructor) checking its arguments against the ranges its annotations declare, so direct
    construction (``RoPE(64, 4, base=-1)``, a notebook) refuses what a config would: one :class:`ConfigError`
    naming the class, the option and what is allowed."""
    ranges: dict[str, Range] | None = None

    @functools.wraps(init)
    def checked(self: Any, *args: Any, **kwargs: Any) -> None:
        nonlocal ranges
        if ranges is None:  # on first use: the annotations name classes defined after the decorator ran
            hints = typing.get_type_hints(init, include_extras=True)
            ranges = {key: found for key, hint in hints.items() if (found := range_of(hint)) is not None}
        if ranges:
            given = inspect.signature(init).bind_partial(self, *args, **kwargs).arguments
            for key, allowed in ranges.items():
                for item in _numbers(given.get(key)):
                    if not allowed.holds(item):
                        owner = getattr(type(self), "name", "") or type(self).__name__
                        raise ConfigError(f"{owner}: {key} must be {allowed.describe()}, got {item!r}")
        init(self, *args, **kwargs)

    return checked


def check_fields(instance: Any, owner: str) -> None:
    """A dataclass option block (``RoPE``'s ``scaling``) built directly refuses what a config would: its fields'
    declared ranges, checked in ``__post_init__``; one :class:`ConfigError` naming ``owner`` and the field."""
    hints = typing.get_type_hints(type(instance), include_extras=True)
    for spec in dataclasses.fields(instance):
        allowed = range_of(hints.get(spec.name, spec.type))
        for item in _numbers(getattr(instance, spec.name)) if allowed else ():
            if not allowed.holds(item):
                raise ConfigError(f"{owner}: {spec.name} must be {allowed.describe()}, got {item!r}")


def _numbers(value: Any) -> list:
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    return [v for v in items if isinstance(v, (int, float)) and not isinstance(v, bool)]


def with_ranges(annotation: Any, key: str, ranges: Mapping[str, Range]) -> Any:
    """``annotation`` carrying ``ranges[key]`` where the table has one (for schemas read from a library's
    signature, whose annotations poslab cannot write)."""
    return Annotated[annotation, ranges[key]] if key in ranges else annotation


def _members(annotation: Any) -> tuple:
    if typing.get_origin(annotation) is Union or type(annotation).__name__ == "UnionType":
        return typing.get_args(annotation)
    return (annotation,)
