"""Ranges declared in annotations: checked wherever a field sits, in a config and when an encoder is built."""

from __future__ import annotations

import re
import typing
from dataclasses import dataclass, field
from typing import Annotated, Optional

import pytest

from poslab.config.checks import check_block, config_key
from poslab.config.composition import compose
from poslab.config.options import keyword_options
from poslab.config.ranges import AT_LEAST_1, FRACTION, Range, range_of
from poslab.encoders import available_encoders, build_encoder, encoder_class
from poslab.encoders.registry import STRUCTURAL_ARGS
from poslab.errors import ConfigError
from poslab.modalities import available_modalities


@dataclass
class Inner:
    share: Annotated[float, FRACTION] = 0.5
    free: float = 2.0


@dataclass
class Outer:
    size: Annotated[int, AT_LEAST_1] = 3
    maybe: Annotated[Optional[int], Range(2)] = None
    sizes: Annotated[list[int], AT_LEAST_1] = field(default_factory=list)
    inner: Inner = field(default_factory=Inner)
    optional_inner: Optional[Inner] = None


def test_ranges_are_checked_in_fields_optional_types_lists_and_nested_blocks():
    """A declared range holds wherever its field sits: a plain field, an optional one, each item of a list, a
    nested block and an optional block; a value inside its range passes."""
    assert check_block({"maybe": 2, "sizes": [1, 2], "optional_inner": {"share": 0.5}}, Outer, "data.", config_key)
    bad = {"size": 0, "maybe": 1, "sizes": [1, 0], "inner": {"share": 1.0}, "optional_inner": {"share": -0.5}}
    for key, value in bad.items():
        item = {"sizes": 0, "inner": 1.0, "optional_inner": -0.5}.get(key, value)
        full = f"data.{key}" + (".share" if "inner" in key else "")
        with pytest.raises(ConfigError, match=rf"^config key '{re.escape(full)}' must be .*, got {item}$"):
            check_block({key: value}, Outer, "data.", config_key)
    assert range_of(Optional[Annotated[int, Range(5)]]) == Range(5) and range_of(int) is None


def _encoder_ranges():
    for name in available_encoders():
        cls = encoder_class(name)
        hints = typing.get_type_hints(cls.__init__, include_extras=True)
        for key in keyword_options(cls, STRUCTURAL_ARGS):
            allowed = range_of(hints.get(key))
            if allowed is not None:
                yield name, key, allowed, hints[key]


ENCODER_RANGES = list(_encoder_ranges())


def _outside(allowed: Range, annotation) -> object:
    """A value just outside ``allowed``, of the annotation's type (a grid: one axis outside)."""
    integral = "int" in str(annotation) and "float" not in str(annotation)
    if allowed.low is not None:
        value = allowed.low if allowed.low_open else allowed.low - (1 if integral else 0.5)
    else:
        value = allowed.high if allowed.high_open else allowed.high + (1 if integral else 0.5)
    value = int(value) if integral else float(value)
    return (value, 4) if "tuple" in str(annotation) else value


def test_the_encoders_declare_ranges():
    assert {("rope", "base"), ("cope", "npos_max"), ("xpos", "gamma"), ("t5", "num_buckets")} <= {
        (name, key) for name, key, *_ in ENCODER_RANGES
    }


@pytest.mark.parametrize(
    ("name", "key", "allowed", "annotation"), ENCODER_RANGES, ids=[f"{n}.{k}" for n, k, *_ in ENCODER_RANGES]
)
def test_every_declared_encoder_range_is_checked_in_code_and_in_config(name, key, allowed, annotation):
    bad = _outside(allowed, annotation)
    item = bad[0] if isinstance(bad, tuple) else bad
    message = f"{name}: {key} must be {allowed.describe()}, got {item!r}"
    with pytest.raises(ConfigError, match="^" + re.escape(message) + "$"):
        build_encoder(name, dim=64, num_heads=4, **{key: bad})
    modality = next(m for m in available_modalities() if name in available_encoders(m))
    text = f"[{bad[0]},{bad[1]}]" if isinstance(bad, tuple) else str(bad)
    message = f"config key 'encoder.{key}' must be {allowed.describe()}, got "
    with pytest.raises(ConfigError, match="^" + re.escape(message)):
        compose([f"modality={modality}", f"encoder={name}", f"encoder.{key}={text}"])
