"""Probes that change the inputs, not the model."""

from __future__ import annotations

import math

import torch

from poslab.positions import Positions


def irregular_lookback(lookback: int, fraction: float) -> int:
    """The longer past that keeps ``lookback`` steps once ``fraction`` of it is dropped."""
    return math.ceil(lookback / (1 - fraction))


def drop_steps(batch: dict, keep: int) -> dict:
    """The irregular-sampling probe: keep ``keep`` random past steps of each window, in order.

    The kept values keep their true timestamps; step indices are recounted
    0..keep−1 as if the series were regular, so index positions become wrong
    while timestamp positions stay right. Fed a past of
    :func:`irregular_lookback` steps, every layout sees its usual input size.
    Which steps a window keeps is drawn from a generator seeded by the window's first timestamp: the same
    draw however the windows are batched or shared out among DDP ranks.
    """
    past, times = batch["past"], batch["pos_past"].times
    lookback = past.shape[1]
    draws = [torch.rand(lookback, generator=torch.Generator().manual_seed(int(t))) for t in times[:, 0].tolist()]
    index = torch.stack(draws).argsort(-1)[:, :keep].sort(-1).values.to(past.device)
    kept = past.gather(1, index[..., None].expand(-1, -1, past.shape[2]))
    horizon = batch["future"].shape[1]
    steps = torch.arange(keep + horizon, device=past.device)
    return {
        **batch,
        "past": kept,
        "pos_past": Positions(steps=steps[:keep], times=times.gather(1, index), steps_start=0, steps_end=keep),
        "pos_future": Positions(
            steps=steps[keep:], times=batch["pos_future"].times, steps_start=keep, steps_end=keep + horizon
        ),
    }
