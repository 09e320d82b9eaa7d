"""What a schema declares, read independently of the checker under test: every range, by dotted key."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterator
from typing import Annotated, Union

from poslab.config.ranges import Range


def declared_ranges(schema: type, prefix: str = "") -> Iterator[tuple[str, Range]]:
    """``(dotted key, range)`` of every field of the dataclass ``schema`` that declares one, nested blocks
    (a dataclass-typed field, optional or not) under their key."""
    hints = typing.get_type_hints(schema, include_extras=True)
    for spec in dataclasses.fields(schema):
        annotation = hints[spec.name]
        members = typing.get_args(annotation) if typing.get_origin(annotation) is Union else (annotation,)
        for member in (annotation, *members):
            found = [m for m in getattr(member, "__metadata__", ()) if isinstance(m, Range)]
            if found:
                yield f"{prefix}{spec.name}", found[0]
                break
        for member in members:
            bare = typing.get_args(member)[0] if typing.get_origin(member) is Annotated else member
            if dataclasses.is_dataclass(bare):
                yield from declared_ranges(bare, f"{prefix}{spec.name}.")
