"""``sinusoidal``: fixed sine / cosine table added to the token embeddings.

Vaswani et al. 2017, "Attention Is All You Need", §3.5:
PE(p, 2i) = sin(p / 10000^(2i/d)), PE(p, 2i+1) = cos(p / 10000^(2i/d)) —
even channels sine, odd channels cosine (interleaved, as in the paper).
Computed from the positions themselves, so any position (randomized, offset,
fractional) has an embedding.
"""

from __future__ import annotations

import torch

from poslab.config.ranges import Base
from poslab.encoders.base import PositionEncoder
from poslab.encoders.registry import register_encoder
from poslab.encoders.rotary import rotation_angles
from poslab.errors import ConfigError


def sinusoidal_table(pos: torch.Tensor, dim: int, base: float = 10000.0) -> torch.Tensor:
    """``[..., L] -> [..., L, dim]`` float32; angles in float64, reduced mod 2π. Made on ``pos``'s device:
    nothing is copied from the host in a forward pass."""
    inv_freq = 1.0 / base ** (torch.arange(0, dim, 2, dtype=torch.float64, device=pos.device) / dim)
    angles = rotation_angles(pos, inv_freq)
    return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)


@register_encoder("sinusoidal")
class Sinusoidal(PositionEncoder):
    paper = "Vaswani et al. 2017"
    reads = "steps"

    def __init__(self, dim: int, num_heads: int, base: Base = 10000.0) -> None:
        super().__init__(dim, num_heads)
        if dim % 2:
            raise ConfigError(f"sinusoidal needs an even model.dim, got {dim}")
        self.base = base

    def encode_input(self, x, pos):
        return x + sinusoidal_table(self.field(pos).to(x.device), self.dim, self.base).to(x.dtype)
