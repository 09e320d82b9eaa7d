"""``sincos3d``: fixed factorised 3D sine-cosine embedding added to the video patch tokens.

The video MAE convention (torchmultimodal ``get_3d_sin_cos_embeddings``, adapted
from FAIR's MAE-ST code; the same split in MVD / UMT ``get_3d_sincos_pos_embed``):
D/4 channels encode the frame t, 3D/4 the patch cell with MAE's 2D table
(column first, then row), concatenated as ``[t | col | row]``, i.e.
``[D/4 | 3D/8 | 3D/8]``. Each part is Vaswani et al.'s sinusoids in MAE's
``[sin | cos]`` order at frequencies 1/T^(k/(d/2)), d its channel count, so D
must be divisible by 16 (every part an even count). Positions may be fractional
(coordinates rescaled to the training clip).
"""

from __future__ import annotations

import torch

from poslab.config.ranges import Base
from poslab.encoders.base import PositionEncoder
from poslab.encoders.grid import sincos_1d, split_coords3d
from poslab.encoders.registry import register_encoder
from poslab.errors import ConfigError


@register_encoder("sincos3d")
class SinCos3D(PositionEncoder):
    paper = "Feichtenhofer et al. 2022"
    reads = "coords3d"

    def __init__(self, dim: int, num_heads: int, temperature: Base = 10000.0) -> None:
        super().__init__(dim, num_heads)
        if dim % 16:
            # D/4 for time and 3D/8 per spatial axis must each be even (a sin and a cos per frequency).
            raise ConfigError(f"sincos3d needs model.dim divisible by 16 (D/4 time, 3D/8 col, 3D/8 row), got {dim}")
        self.temperature = temperature

    def table(self, coords: torch.Tensor) -> torch.Tensor:
        """``[..., L, 3]`` -> ``[..., L, D]``: ``[t (D/4) | col (3D/8) | row (3D/8)]``."""
        t, rows, cols = split_coords3d(coords)
        d_t, d_s = self.dim // 4, 3 * self.dim // 8
        return torch.cat(
            (
                sincos_1d(t, d_t, self.temperature),
                sincos_1d(cols, d_s, self.temperature),
                sincos_1d(rows, d_s, self.temperature),
            ),
            dim=-1,
        )

    def encode_input(self, x, pos):
        return x + self.table(self.field(pos)).to(device=x.device, dtype=x.dtype)
