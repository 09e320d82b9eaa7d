"""Relative-offset biases built once per forward pass (shared by ALiBi, T5, Shaw).

A bias that depends only on the offset ``k − q`` is Toeplitz when positions
are consecutive integers (the usual case): its ``Lq × Lk`` matrix is built from
the ``Lq + Lk − 1`` distinct offsets with a strided view, instead of bucketing
and gathering a million entries (whose embedding backward sorts them).
Other positions — randomized, batched, fractional — take the general path.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def relative_distances(q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
    """``k − q`` for every pair: ``[..., Lq, Lk]`` (float)."""
    return k_pos.float()[..., None, :] - q_pos.float()[..., :, None]


def _consecutive(pos: torch.Tensor) -> bool:
    if pos.dim() != 1 or pos.numel() == 0:
        return False
    if pos.is_floating_point() and not torch.equal(pos, pos.round()):
        return False
    return bool(pos[-1] - pos[0] == pos.numel() - 1) and bool((pos[1:] > pos[:-1]).all())


def offset_bias(
    values_at: Callable[[torch.Tensor], torch.Tensor], q_pos: torch.Tensor, k_pos: torch.Tensor
) -> torch.Tensor:
    """``[H, Lq, Lk]`` (or ``[B, H, Lq, Lk]``) from ``values_at(offsets) -> [H, *offsets.shape]``."""
    if _consecutive(q_pos) and _consecutive(k_pos):
        lq, lk = q_pos.numel(), k_pos.numel()
        shift = float(k_pos[0] - q_pos[0])
        offsets = torch.arange(-(lq - 1), lk, device=q_pos.device, dtype=torch.float32) + shift
        values = values_at(offsets)  # [H, Lq + Lk - 1]
        # windows[s, t] = values[s + t]; row i needs offset j - i, i.e. window Lq - 1 - i
        return values.unfold(-1, lk, 1).flip(-2)
    bias = values_at(relative_distances(q_pos, k_pos))  # [H, ..., Lq, Lk]
    return bias.movedim(0, -3)
