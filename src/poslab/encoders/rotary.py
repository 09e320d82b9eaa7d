"""Rotation math shared by the RoPE family (pure functions, no parameters).

Two pair layouts exist and are *not* interchangeable (transformers#25199):

* ``interleaved`` — adjacent pairs ``(x0, x1), (x2, x3), …``: the original
  RoFormer / GPT-J / Meta / rope-vit layout, equal to multiplying
  ``x0 + i·x1`` by ``exp(i·θ)``.
* ``half`` — pairs ``(x_j, x_{j+R})``: GPT-NeoX / Hugging Face ``rotate_half``.

Either is a valid RoPE as long as queries and keys use the same one.
"""

from __future__ import annotations

import math
from typing import Literal

import torch

Layout = Literal["interleaved", "half"]
LAYOUTS: tuple[str, ...] = ("interleaved", "half")


def rotation_angles(pos: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """``pos ⊗ inv_freq`` reduced modulo 2π, returned in float32.

    Angles are formed in float64 and reduced before the cast: float32 angles
    near 1e5 lose ~1e-3 rad, and cos/sin of unreduced float16 angles are badly
    wrong at large positions (gpt-neox#1003, transformers#29285).
    """
    angles = pos.to(torch.float64)[..., None] * inv_freq.to(torch.float64)
    return torch.remainder(angles, 2 * math.pi).to(torch.float32)


def apply_rotary(x: torch.Tensor, angles: torch.Tensor, layout: Layout = "interleaved") -> torch.Tensor:
    """Rotate the first ``2R`` channels of ``x`` by ``angles`` (``[..., L, R]``).

    RoFormer (Su et al. 2021) eq. 34: each channel pair ``(a, b)`` becomes
    ``(a·cosθ − b·sinθ, a·sinθ + b·cosθ)``. Channels past ``2R`` pass through
    unchanged (partial rotary). ``angles`` must broadcast against
    ``x[..., :R]``. The rotation runs in float32 and is cast back to x's dtype.
    """
    return apply_cos_sin(x, angles.cos(), angles.sin(), layout)


def apply_cos_sin(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: Layout = "interleaved"
) -> torch.Tensor:
    """:func:`apply_rotary` with ``cos`` / ``sin`` of the angles precomputed (and cached)."""
    rot = 2 * cos.shape[-1]
    if rot > x.shape[-1]:
        raise ValueError(f"{rot} rotary channels exceed head dim {x.shape[-1]}")
    xr = x[..., :rot].float()
    if layout == "interleaved":
        a, b = xr[..., 0::2], xr[..., 1::2]
        out = torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)
    elif layout == "half":
        a, b = xr[..., : rot // 2], xr[..., rot // 2 :]
        out = torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)
    else:
        raise ValueError(f"unknown rotary layout '{layout}'; valid: {', '.join(LAYOUTS)}")
    out = out.to(x.dtype)
    return out if rot == x.shape[-1] else torch.cat((out, x[..., rot:]), dim=-1)


def per_token_angles(angles: torch.Tensor) -> torch.Tensor:
    """Insert the head axis into shared angles: ``[L, R]`` stays, ``[B, L, R] -> [B, 1, L, R]``."""
    return angles.unsqueeze(-3) if angles.dim() == 3 else angles


def rotate_cached(cache: LastInputCache, x: torch.Tensor, positions: torch.Tensor, angles_of, layout: Layout):
    """``x`` rotated by ``angles_of(positions)`` (``[..., L, R]``); cos / sin are computed once per positions
    tensor (``cache``), so the layers of one forward pass share them. For fixed frequencies only."""

    def cos_sin(source: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        angles = per_token_angles(angles_of(source.to(x.device)))
        return angles.cos(), angles.sin()

    cos, sin = cache.get(positions, cos_sin)
    return apply_cos_sin(x, cos, sin, layout)


class LastInputCache:
    """Remembers ``compute(t)`` for the last tensor ``t`` it was given.

    Every layer rotates queries and keys with the same positions object, so
    fixed-frequency tables are computed once per forward pass instead of
    2 × depth times. The source tensor is held, so its ``id`` cannot be reused
    by another tensor, and its in-place version counter is checked. Only for
    values that need no gradient (fixed frequencies).
    """

    def __init__(self) -> None:
        self._source: torch.Tensor | None = None
        self._version = -1
        self._key = None
        self._value = None

    def get(self, source: torch.Tensor, compute, key=None):
        """``compute(source)``, reused while ``source`` (and ``key``) stay the same.

        Under ``torch.compile`` nothing is cached: the graph computes the value
        and Python-side state would only add guards.
        """
        if torch.compiler.is_compiling():
            return compute(source)
        version = 0 if source.is_inference() else source._version  # inference tensors have no counter
        if source is not self._source or version != self._version or key != self._key:
            # Normal tensors even during validation (inference mode): the value may be
            # reused by a training step, which saves it for backward.
            with torch.inference_mode(False), torch.no_grad():
                self._value = compute(source)
            self._source, self._version, self._key = source, version, key
        return self._value
