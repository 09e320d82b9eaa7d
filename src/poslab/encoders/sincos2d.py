"""``sincos2d``: fixed 2D sine-cosine embedding added to the patch tokens.

MAE (He et al. 2022, ``get_2d_sincos_pos_embed``) and "Better plain ViT
baselines" (Beyer et al. 2022): half of the channels encode the column, half
the row, each with Vaswani et al.'s sinusoids at frequencies 1/T^(k/(D/4)).
Positions may be fractional (coordinates rescaled to the training grid).
"""

from __future__ import annotations

import torch

from poslab.config.ranges import Base
from poslab.encoders.base import PositionEncoder
from poslab.encoders.grid import sincos_1d, split_coords
from poslab.encoders.registry import register_encoder
from poslab.errors import ConfigError


@register_encoder("sincos2d")
class SinCos2D(PositionEncoder):
    paper = "He et al. 2022"
    reads = "coords"

    def __init__(self, dim: int, num_heads: int, temperature: Base = 10000.0) -> None:
        super().__init__(dim, num_heads)
        if dim % 4:
            raise ConfigError(f"sincos2d needs model.dim divisible by 4, got {dim}")
        self.temperature = temperature

    def table(self, coords: torch.Tensor) -> torch.Tensor:
        """``[..., L, 2]`` -> ``[..., L, D]``: column half first, then row (MAE order)."""
        rows, cols = split_coords(coords)
        half = self.dim // 2
        return torch.cat((sincos_1d(cols, half, self.temperature), sincos_1d(rows, half, self.temperature)), dim=-1)

    def encode_input(self, x, pos):
        return x + self.table(self.field(pos)).to(device=x.device, dtype=x.dtype)
