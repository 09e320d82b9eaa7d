"""Length generalisation: metrics at 1×, 2×, 4×, 8× the training context.

Protocol of the ALiBi paper (Press et al. 2022, §4): the same held-out text is
cut into non-overlapping windows of each length and the loss is averaged over
every predicted token. For encoders with context extensions (RoPE: linear,
ntk, dynamic, yarn) the curve is repeated with each extension applied at
evaluation time with factor = the length multiple, without retraining.
An encoder that cannot run at a length (a learned table) records why.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from torch import nn

from poslab.encoders.base import PositionEncoder
from poslab.errors import PoslabError

BASE = "base"


@dataclass
class LengenResult:
    """One row per (variant, multiple): metric values, or the reason there are none."""

    context: int
    rows: list[dict] = field(default_factory=list)

    def metrics(self) -> dict[str, float]:
        """``lengen/<metric>@<m>x`` (base) and ``lengen/<metric>@<m>x/<extension>``."""
        out = {}
        for row in self.rows:
            suffix = "" if row["variant"] == BASE else f"/{row['variant']}"
            for name, value in row["values"].items():
                if isinstance(value, float):  # lists (accuracy by depth) go to tables, not metrics
                    out[f"lengen/{name}@{row['multiple']}x{suffix}"] = value
        return out

    def series(self, metric: str) -> dict[str, list[float | None]]:
        """Variant -> values by multiple (None where it could not run)."""
        out: dict[str, list[float | None]] = {}
        for row in self.rows:
            out.setdefault(row["variant"], []).append(row["values"].get(metric))
        return out

    def multiples(self) -> list[int]:
        return sorted({row["multiple"] for row in self.rows})


@contextmanager
def encoder_swapped(backbone: nn.Module, encoder: PositionEncoder) -> Iterator[None]:
    """Run the backbone with another encoder (an extended copy), then restore it."""
    original = backbone.encoder
    backbone.encoder = encoder
    try:
        yield
    finally:
        backbone.encoder = original


def evaluate_lengths(
    backbone: nn.Module,
    measure: Callable[[int], dict[str, float]],
    context: int,
    multiples: Sequence[int],
    extensions: Sequence[str],
) -> LengenResult:
    """``measure(multiple)`` -> metrics at that length, for the trained encoder and each extension."""
    encoder: PositionEncoder = backbone.encoder
    usable = [e for e in extensions if e in encoder.context_extensions]
    result = LengenResult(context)
    for multiple in multiples:
        base = _attempt(lambda m=multiple: measure(m))
        result.rows.append({"variant": BASE, "multiple": multiple, "length": multiple * context, **base})
        for kind in usable:
            if multiple == 1:  # factor 1 is the trained model itself
                row = base
            else:
                with encoder_swapped(backbone, encoder.extended(kind, float(multiple))):
                    row = _attempt(lambda m=multiple: measure(m))
            result.rows.append({"variant": kind, "multiple": multiple, "length": multiple * context, **row})
    return result


def _attempt(run: Callable[[], dict[str, float]]) -> dict:
    try:
        return {"values": run(), "note": None}
    except PoslabError as exc:  # e.g. a learned table shorter than the sequence
        return {"values": {}, "note": str(exc)}
