"""What ``poslab show`` draws for time series: one week of hourly timestamps, laid out weekday x hour."""

from __future__ import annotations

import torch

from poslab.modalities import Canvas
from poslab.positions import Positions

MONDAY = 1_467_590_400  # 2016-07-04 00:00 UTC, a Monday (ETTh1's period)
HOURS = 7 * 24


def canvas(length: int | None) -> Canvas:
    """A week of hours (``length`` is fixed by the week); the reference token is Monday 12:00."""
    steps = torch.arange(HOURS)
    return Canvas(
        positions=Positions(steps=steps, times=MONDAY + 3600 * steps, steps_start=0, steps_end=HOURS),
        length=HOURS,
        context={"max_len": HOURS, "bidirectional": True},
        layout=(7, 24),
        axes=("weekday (Mon = 0)", "hour"),
        reference=12,
        caption="one week of hourly timestamps from Monday 2016-07-04: scores with Monday 12:00",
    )
