"""What ``poslab show`` draws for text: consecutive steps of the causal language model."""

from __future__ import annotations

from poslab.modalities import Canvas
from poslab.positions import Positions


def canvas(length: int | None) -> Canvas:
    length = length or 64
    return Canvas(
        positions=Positions.consecutive(length),
        length=length,
        context={"max_len": length, "bidirectional": False},  # the causal text model's facts
        causal=True,
        caption=f"steps 0..{length - 1} of a causal model",
    )
