"""``fire``: FIRE, a learned function of the progressively normalised distance (Li et al. 2023, ICLR 2024).

"Functional Interpolation for Relative Positions Improves Long Context
Transformers", eq. (4)-(6): the bias of query i for key j is

    b(i, j) = f_θ( ψ(i − j) / ψ(max(L, i)) ),   ψ(x) = log(c·x + 1),

f_θ a small MLP (1 → ``mlp_width`` → one output per head, ReLU), c and the
threshold L learned. As in the paper's reference listing: c starts at 0.1,
L = |``threshold_scale`` · ``threshold``| with the scale learned (from 1) and
``threshold`` fixed (512), both ψ taken of absolute values and the
normaliser offset by ``eps``. Dividing by ψ of the query's own position
("progressive interpolation") keeps every normalised distance of a visible
key in [0, 1] at any length (tested), which is what lets FIRE extrapolate.
The bias depends on the query's position, not only on the offset, so it is a
full ``attention_bias`` (no Toeplitz shortcut); it is computed once per
forward pass and shared by the layers, like every bias here.
"""

from __future__ import annotations

import torch
from torch import nn

from poslab.encoders.base import PositionEncoder
from poslab.encoders.registry import register_encoder


@register_encoder("fire")
class Fire(PositionEncoder):
    reads = "steps"  # the Positions field it uses: it fits every modality whose data provides it

    def __init__(
        self,
        dim: int,
        num_heads: int,
        mlp_width: int = 32,
        init_c: float = 0.1,
        threshold: float = 512.0,
        eps: float = 1e-6,
    ) -> None:
        super().__init__(dim, num_heads)
        if mlp_width < 1 or threshold <= 0 or eps <= 0:
            raise ValueError(
                f"fire needs mlp_width >= 1, threshold > 0 and eps > 0, got {mlp_width}, {threshold}, {eps}"
            )
        self.mlp = nn.Sequential(nn.Linear(1, mlp_width), nn.ReLU(), nn.Linear(mlp_width, num_heads))
        self.c = nn.Parameter(torch.tensor(float(init_c)))
        self.threshold_scale = nn.Parameter(torch.tensor(1.0))
        self.register_buffer("threshold", torch.tensor(float(threshold)), persistent=False)
        self.eps = eps

    def normalized_distance(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """ψ(i − j) / ψ(max(L, i)) for query positions ``q`` ``[..., Lq]`` and keys ``k`` ``[..., Lk]``."""
        q, k = q.float(), k.float()
        distance = q[..., :, None] - k[..., None, :]
        normaliser = torch.maximum(q, (self.threshold_scale * self.threshold).abs())[..., :, None]
        psi = torch.log(torch.abs(self.c * distance) + 1)
        return psi / (torch.log(torch.abs(self.c * normaliser) + 1) + self.eps)

    def attention_bias(self, q_pos, k_pos):
        """``[H, Lq, Lk]`` (``[B, H, Lq, Lk]`` for batched positions): the MLP of the normalised distance."""
        q, k = self.field(q_pos), self.field(k_pos)
        device = self.c.device
        bias = self.mlp(self.normalized_distance(q.to(device), k.to(device)).unsqueeze(-1))  # [..., Lq, Lk, H]
        return bias.movedim(-1, -3)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, mlp_width={self.mlp[0].out_features}, eps={self.eps}"
