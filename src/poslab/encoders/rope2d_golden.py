"""``rope2d_golden``: 2D RoPE with uniformly spread directions ("golden gate" RoPE; J. Xiong 2025, "On
N-dimensional Rotary Positional Embeddings").

Axial 2D RoPE turns half its pairs with the column and half with the row, so
a score sees offsets along the two axes only; RoPE-Mixed learns a direction
per pair. Here pair i turns by ω_i·⟨u_i, p⟩, p = (col, row), with fixed unit
directions u_i = (cos φ_i, sin φ_i), φ_i = i·π/φ (φ the golden ratio): each
pair its own direction on the half circle, as evenly spread as any count
allows, and ω_i = base^(−i/P) over the P = Dh/2 pairs (RoFormer's ladder over
all of them). Every pair's angle is linear in p, so the score depends on
the 2D offset only; nothing is learned.
"""

from __future__ import annotations

import math

import torch

from poslab.config.ranges import Base
from poslab.encoders.base import PositionEncoder
from poslab.encoders.grid import split_coords
from poslab.encoders.registry import register_encoder
from poslab.encoders.rotary import Layout, apply_rotary

GOLDEN_RATIO = (1 + math.sqrt(5)) / 2


def golden_frequencies(pairs: int, base: float) -> torch.Tensor:
    """``[2, P]`` (column, row) frequency of each pair: ω_i·(cos φ_i, sin φ_i), φ_i = i·π/φ, ω_i = base^(−i/P)."""
    i = torch.arange(pairs, dtype=torch.float64)
    magnitude, direction = base ** (-i / pairs), i * math.pi / GOLDEN_RATIO
    return torch.stack((magnitude * direction.cos(), magnitude * direction.sin()))


@register_encoder("rope2d_golden")
class GoldenRoPE2D(PositionEncoder):
    paper = "Xiong 2025"
    reads = "coords"

    # base: the frequencies run from 1 down to 1/base (rope-vit's axial 100)
    def __init__(self, dim: int, num_heads: int, base: Base = 100.0, layout: Layout = "interleaved") -> None:
        super().__init__(dim, num_heads)
        self.base, self.layout = base, layout
        self.register_buffer("freqs", golden_frequencies(self.head_dim // 2, base), persistent=False)

    def angles(self, coords: torch.Tensor) -> torch.Tensor:
        """``[..., L, 2] -> [..., L, Dh/2]`` angles ω_i·⟨u_i, (col, row)⟩ (float64 products, float32 out)."""
        rows, cols = split_coords(coords)
        fx, fy = self.freqs[0], self.freqs[1]
        return (cols.double()[..., None] * fx + rows.double()[..., None] * fy).float()

    def rotate(self, x, pos):
        angles = self.angles(self.field(pos).to(x.device))
        return apply_rotary(x, angles.unsqueeze(-3) if angles.dim() == 3 else angles, self.layout)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, base={self.base}, layout={self.layout}"
