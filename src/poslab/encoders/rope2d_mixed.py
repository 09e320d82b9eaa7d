"""``rope2d_mixed``: RoPE with learned, per-head 2D frequencies (RoPE-Mixed).

Heo et al. 2024, "Rotary Position Embedding for Vision Transformer", eq. 11:
pair t of head h rotates by θ = f^x_{h,t}·col + f^y_{h,t}·row, with the
frequency vectors (f^x, f^y) learned, so a head can attend along diagonals.
Initialisation follows rope-vit's ``init_random_2d_freqs`` (base 10): pairs
of magnitude 1/base^(4k/Dh) pointing in a random direction per head, the second
half of the pairs turned by π/2.

One frequency set per layer by default, as the paper and rope-vit learn them
(``per_layer=false``: one set shared by the layers).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from poslab.config.ranges import Base, OptionalCount
from poslab.encoders.base import PositionEncoder
from poslab.encoders.grid import split_coords
from poslab.encoders.layer_views import LayerViews
from poslab.encoders.registry import register_encoder
from poslab.encoders.rotary import Layout, apply_rotary
from poslab.errors import ConfigError


def init_mixed_frequencies(head_dim: int, num_heads: int, base: float) -> torch.Tensor:
    """``[2, H, Dh/2]`` (x, y) frequencies: rope-vit's random-direction init."""
    quarter = head_dim // 4
    magnitude = 1.0 / base ** (torch.arange(0, head_dim, 4, dtype=torch.float32)[:quarter] / head_dim)
    direction = torch.rand(num_heads, 1) * 2 * math.pi
    phi = torch.cat((direction.expand(-1, quarter), direction.expand(-1, quarter) + math.pi / 2), dim=-1)
    mag = torch.cat((magnitude, magnitude))
    return torch.stack((mag * phi.cos(), mag * phi.sin()))


@register_encoder("rope2d_mixed")
class MixedRoPE2D(LayerViews, PositionEncoder):
    paper = "Heo et al. 2024"
    reads = "coords"

    # base: rope-vit's theta for the mixed initialisation
    def __init__(
        self,
        dim: int,
        num_heads: int,
        base: Base = 10.0,
        layout: Layout = "interleaved",
        per_layer: bool = True,  # one frequency set per layer, as the paper learns them (false: one shared)
        depth: OptionalCount = None,  # None: the model's depth (the data fills it); sets per_layer's count
    ) -> None:
        super().__init__(dim, num_heads)
        if self.head_dim % 4:
            raise ConfigError(f"rope2d_mixed needs a head dim divisible by 4, got {self.head_dim}")
        self.base = base
        self.layout = layout
        self.per_layer, self.sets = per_layer, (depth or 1) if per_layer else 1
        sets = [init_mixed_frequencies(self.head_dim, num_heads, base) for _ in range(self.sets)]  # each its own
        self.freqs = nn.Parameter(torch.stack(sets))  # [sets, 2, H, Dh/2]: directions drawn per layer, as rope-vit

    def angles(self, coords: torch.Tensor) -> torch.Tensor:
        """``[..., L, 2] -> [..., H, L, Dh/2]`` per-head angles (float32, autograd)."""
        rows, cols = split_coords(coords)
        fx, fy = self.freqs[self.layer, 0], self.freqs[self.layer, 1]  # [H, R]: this layer's set
        return cols[..., None, :, None] * fx[:, None, :] + rows[..., None, :, None] * fy[:, None, :]

    def rotate(self, x, pos):
        return apply_rotary(x, self.angles(self.field(pos).to(x.device)), self.layout)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, base={self.base}, layout={self.layout}, sets={self.sets}"
