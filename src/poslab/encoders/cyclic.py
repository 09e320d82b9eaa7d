"""``cyclic``: sin / cos of the timestamp's phase in each period, through a linear layer.

For each period p (day and week by default; hour, year on request) and
harmonic k, the pair (sin 2πk·φ, cos 2πk·φ) with φ = (t mod p) / p computed
exactly in integer seconds. Unlike the linear GluonTS features, 23:00 and
00:00 are neighbours. A period longer than the training data (a year on the
12-week Taylor series) puts phases in the test split that training never saw:
measured, ``rope+cyclic`` with a year period was 4x worse than no position at
all on Taylor (patch layout).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from poslab.config.ranges import Count
from poslab.encoders.base import PositionEncoder
from poslab.encoders.registry import register_encoder
from poslab.errors import ConfigError
from poslab.positions.timestamps import PERIODS


def cyclic_features(times: torch.Tensor, periods: list[int], harmonics: int) -> torch.Tensor:
    """``[..., 2 · len(periods) · harmonics]`` float32."""
    seconds = times.long()
    columns = []
    for period in periods:
        phase = (seconds % period).double() / period
        for k in range(1, harmonics + 1):
            angle = 2 * math.pi * k * phase
            columns += [angle.sin(), angle.cos()]
    return torch.stack(columns, dim=-1).float()


@register_encoder("cyclic")
class Cyclic(PositionEncoder):
    paper = ""  # a common construction, no one paper
    reads = "times"

    def __init__(self, dim: int, num_heads: int, periods: list[str] | None = None, harmonics: Count = 2) -> None:
        super().__init__(dim, num_heads)
        names = list(periods or ["day", "week"])
        unknown = [p for p in names if p not in PERIODS]
        if unknown:
            raise ConfigError(f"cyclic: unknown period {unknown[0]!r}; valid: {', '.join(PERIODS)}")
        self.periods = [PERIODS[p] for p in names]
        self.period_names = names
        self.harmonics = harmonics
        self.proj = nn.Linear(2 * len(self.periods) * harmonics, dim, bias=False)

    def encode_input(self, x, pos):
        features = cyclic_features(self.field(pos).to(x.device), self.periods, self.harmonics)
        return x + self.proj(features).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, periods={self.period_names}, harmonics={self.harmonics}"
