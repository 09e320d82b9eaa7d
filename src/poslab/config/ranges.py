"""Value ranges, declared where an option is declared (``Annotated[int, AT_LEAST_1]`` at a field or a parameter:
the key, its type, its default and its range on one line) and checked with the config (:mod:`~poslab.config.checks`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Optional


@dataclass(frozen=True)
class Range:
    """The values a numeric key may take (``None``: unbounded on that side); a list is checked item by item."""

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
            opened, closed = "(" if self.low_open else "[", ")" if self.high_open else "]"
            text = f"in {opened}{show(self.low)}, {show(self.high)}{closed}"
        return text + "".join(f" or {show(x)}" for x in self.also)


AT_LEAST_1, AT_LEAST_0, POSITIVE = Range(1), Range(0), Range(0, low_open=True)
FRACTION = Range(0, 1, high_open=True)  # [0, 1)
SEED = Range(0, 2**32 - 1)  # what NumPy's seeding accepts
UNIT = Range(0, 1, low_open=True)  # (0, 1]

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

# The model sizes every modality shares. Upper bounds far past what this template trains, below what fails slowly:
# 10^9 layers would be built one small block at a time until memory runs out (one huge tensor fails at once).
Width = Annotated[int, Range(1, 2**16)]
Depth = Annotated[int, Range(1, 1024)]
Heads = Annotated[int, Range(1, 1024)]
MlpRatio = Annotated[float, Range(0, 64, low_open=True)]
Dropout = Annotated[float, FRACTION]


def range_of(annotation: Any) -> Range | None:
    """The :class:`Range` an annotation carries (``Annotated[int, R]``, also as a member of a union), if any."""
    for member in (annotation, *getattr(annotation, "__args__", ())):
        found = next((m for m in getattr(member, "__metadata__", ()) if isinstance(m, Range)), None)
        if found:
            return found
    return None
