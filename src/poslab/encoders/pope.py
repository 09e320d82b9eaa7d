"""``pope``: Polar coordinate Position Embedding (Gopalakrishnan et al. 2025, "Decoupling the 'What' and
'Where' With Polar Coordinate Positional Embeddings", arXiv 2509.10534, §3; reference:
lucidrains/PoPE-pytorch, ``pope.py`` ``apply_pope_to_qk`` and ``attention.py``).

Each of a head's d channels becomes a complex number whose magnitude is the content and whose phase is the
position alone:

    q̃_c = softplus(q_c)·e^{i t θ_c},   k̃_c = softplus(k_c)·e^{i (s θ_c + δ_hc)},
    score = Re Σ_c q̃_c* k̃_c / √d = Σ_c softplus(q_c)·softplus(k_c)·cos((s − t)θ_c + δ_hc) / √d,

with θ_c = base^(−c/d) (d frequencies, one per channel, where RoPE has d/2) and δ a learned phase per head
and channel, clamped to [−2π, 0] (zero at the start, as the reference; ``phase_bias=false`` leaves it
out). RoPE lets a query's content move its phase, so content and position mix; here they do not.

The hooks return each channel as its (cos, sin) pair, interleaved as the reference's ``(d two)``: queries
and keys of width 2d whose dot product is the sum above. Attention divides by √(2d) for that width; both
are multiplied by 2^¼ so that the score is the reference's (its ``softmax_scale`` is the head's 1/√d).
Tokens without a position (a class token) keep phase 0 (keys: δ), the reference's zero-padded phases.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from poslab.config.ranges import Base
from poslab.encoders.base import PositionEncoder
from poslab.encoders.registry import register_encoder
from poslab.encoders.rotary import LastInputCache, rotation_angles

#: Queries and keys twice as wide: 2^¼ on each restores the score over √d that attention's 1/√(2d) halves.
WIDTH_CORRECTION = 2**0.25


@register_encoder("pope")
class PoPE(PositionEncoder):
    paper = "Gopalakrishnan et al. 2025"
    reads = "steps"

    def __init__(
        self,
        dim: int,
        num_heads: int,
        base: Base = 10000.0,
        phase_bias: bool = True,  # the learned key phase δ per head and channel (the reference's bias)
    ) -> None:
        super().__init__(dim, num_heads)
        self.base = base
        exponent = torch.arange(self.head_dim, dtype=torch.float64) / self.head_dim
        self.register_buffer("inv_freq", base**-exponent, persistent=False)
        self.phase = nn.Parameter(torch.zeros(num_heads, self.head_dim)) if phase_bias else None
        self._angles_of = LastInputCache()  # every layer's queries and keys turn by the same positions

    def _polar(self, x: torch.Tensor, angles: torch.Tensor | None, key: bool) -> torch.Tensor:
        """softplus(x)·(cos φ, sin φ) per channel, interleaved: ``[B, H, L, d] -> [B, H, L, 2d]``."""
        magnitude = F.softplus(x.float())
        phase = torch.zeros_like(magnitude) if angles is None else angles.expand_as(magnitude)
        if key and self.phase is not None:
            phase = phase + self.phase.clamp(-2 * math.pi, 0.0)[:, None, :]
        polar = torch.stack((magnitude * phase.cos(), magnitude * phase.sin()), dim=-1).flatten(-2)
        return (polar * WIDTH_CORRECTION).to(x.dtype)

    def _angles(self, pos, device) -> torch.Tensor:
        """t·θ_c per token: ``[L, d]``, or ``[B, 1, L, d]`` for per-sample positions (over the heads)."""

        def angles(steps):
            turned = rotation_angles(steps.to(self.inv_freq.device), self.inv_freq).to(device)
            return turned.unsqueeze(-3) if turned.dim() == 3 else turned

        return self._angles_of.get(self.field(pos), angles, key=device)

    def rotate_query(self, x, pos):
        return self._polar(x, self._angles(pos, x.device), key=False)

    def rotate_key(self, x, pos):
        return self._polar(x, self._angles(pos, x.device), key=True)

    def rotate_tokens(self, hook, x, pos, prefix):
        """Tokens without a position are made polar too (phase 0), so that every key has the same width."""
        if not prefix:
            return getattr(self, hook)(x, pos)
        unplaced = self._polar(x[..., :prefix, :], None, key=hook == "rotate_key")
        return torch.cat((unplaced, getattr(self, hook)(x[..., prefix:, :], pos)), dim=-2)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, base={self.base}, phase_bias={self.phase is not None}"
