"""``rope2d``: axial 2D RoPE with fixed frequencies.

Heo et al. 2024, "Rotary Position Embedding for Vision Transformer" (RoPE-Axial,
eq. 10): half of each head's channel pairs rotate with the column, half with
the row, each at frequencies 1/base^(4k/Dh), k < Dh/4 (rope-vit uses base 100).
Scores then depend only on the 2D offset between two patches (tested).
The class token is not rotated (the backbone passes only patch tokens).
"""

from __future__ import annotations

import torch

from poslab.config.ranges import Base
from poslab.encoders.base import PositionEncoder
from poslab.encoders.grid import split_coords
from poslab.encoders.registry import register_encoder
from poslab.encoders.rotary import LastInputCache, Layout, rotate_cached, rotation_angles
from poslab.errors import ConfigError


@register_encoder("rope2d")
class AxialRoPE2D(PositionEncoder):
    paper = "Heo et al. 2024"
    reads = "coords"

    # layout: interleaved (adjacent pairs) | half (rotate_half)
    # base: rope-vit's theta for axial frequencies
    def __init__(self, dim: int, num_heads: int, base: Base = 100.0, layout: Layout = "interleaved") -> None:
        super().__init__(dim, num_heads)
        if self.head_dim % 4:
            raise ConfigError(f"rope2d needs a head dim divisible by 4, got {self.head_dim}")
        self.base = base
        self.layout = layout
        quarter = self.head_dim // 4
        inv_freq = 1.0 / base ** (torch.arange(0, self.head_dim, 4, dtype=torch.float64)[:quarter] / self.head_dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self._cos_sin = LastInputCache()

    def angles(self, coords: torch.Tensor) -> torch.Tensor:
        """``[..., L, 2] -> [..., L, Dh/2]``: column angles first, then row angles."""
        rows, cols = split_coords(coords)
        return torch.cat((rotation_angles(cols, self.inv_freq), rotation_angles(rows, self.inv_freq)), dim=-1)

    def rotate(self, x, pos):
        return rotate_cached(self._cos_sin, x, self.field(pos), self.angles, self.layout)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, base={self.base}, layout={self.layout}"
