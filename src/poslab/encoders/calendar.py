"""``calendar``: summed embeddings of month, day of month, weekday, hour (and minute).

Time-Series-Library's ``TemporalEmbedding`` (Informer, Zhou et al. 2021):
tables of 13 months, 32 days, 7 weekdays, 24 hours and — for data finer than
hourly — 4 quarter-hour buckets (``minute // 15``), summed and added to the
tokens. ``embedding=learned`` (default) trains the tables; ``fixed`` uses
Vaswani sinusoids over each table's rows (TSLib's ``FixedEmbedding``), whose
neighbouring rows — Friday and Saturday — are nearly equal: on a series that
depends only on weekday vs weekend it learned ~5x slower than ``learned`` (a
measurement, in docs/encoders.md; no test pins it).
``fields`` picks the tables: on a series shorter than a year, month and
day-of-month take values in the test split that training never saw (a learned
row that never trained is noise), so ``fields=[weekday, hour]`` is the safe
choice there.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from poslab.config.ranges import OptionalCount
from poslab.encoders.base import PositionEncoder
from poslab.encoders.registry import register_encoder
from poslab.encoders.sinusoidal import sinusoidal_table
from poslab.errors import ConfigError
from poslab.positions.timestamps import calendar_fields

TABLES = {"month": 13, "day": 32, "weekday": 7, "hour": 24, "minute": 4}


@register_encoder("calendar")
class Calendar(PositionEncoder):
    paper = "Zhou et al. 2021"
    reads = "times"

    def __init__(
        self,
        dim: int,
        num_heads: int,
        embedding: Literal["fixed", "learned"] = "learned",  # learned | fixed (sinusoidal rows, TSLib FixedEmbedding)
        fields: list[str]
        | None = None,  # None: month, day, weekday, hour (+ minute below hourly); e.g. [weekday, hour]
        step_seconds: OptionalCount = None,  # None: the data's sampling step (adds the minute table below one hour)
    ) -> None:
        super().__init__(dim, num_heads)
        self.embedding = embedding
        wanted = list(fields or TABLES)
        unknown = [f for f in wanted if f not in TABLES]
        if unknown:
            raise ConfigError(f"calendar: unknown field {unknown[0]!r}; valid: {', '.join(TABLES)}")
        self.fields = [f for f in wanted if f != "minute" or (step_seconds or 3600) < 3600]
        self.tables = nn.ModuleDict()
        for name in self.fields:
            table = nn.Embedding(TABLES[name], dim)
            if embedding == "fixed":
                table.weight.data.copy_(sinusoidal_table(torch.arange(TABLES[name]), dim))
                table.weight.requires_grad_(False)
            self.tables[name] = table

    def encode_input(self, x, pos):
        fields = calendar_fields(self.field(pos).to(x.device))
        fields["minute"] = fields["minute"] // 15
        out = x
        for name in self.fields:
            out = out + self.tables[name](fields[name]).to(x.dtype)
        return out

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, embedding={self.embedding}, fields={self.fields}"
