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
forward pass and shared by the layers, like every bias here, a few query rows
at a time (:data:`CHUNK_ELEMENTS`) so that the MLP's hidden layer never
exists for every pair at once.
"""

from __future__ import annotations

import functools

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from poslab.config.ranges import Count, Positive
from poslab.encoders.base import PositionEncoder
from poslab.encoders.registry import register_encoder

#: Elements of the MLP's hidden layer (query rows x keys x ``mlp_width``) per chunk of query rows: one chunk's
#: exists at a time, and the backward recomputes it (``torch.utils.checkpoint``) rather than keeping every
#: chunk's. One training step of the ``make bench`` model (2 CPU cores): at L = 2048, 2.28x ``none``'s time
#: against 3.07x with the bias made whole (2^20: 2.57x, 2^19: 2.83x), and peak memory 1.30x against 4.62x;
#: at L = 1024, 1.84x against 2.21x (2^22: 1.94x).
CHUNK_ELEMENTS = 1 << 21


@register_encoder("fire")
class Fire(PositionEncoder):
    paper = "Li et al. 2023"
    reads = "steps"  # the Positions field it uses: it fits every modality whose data provides it

    def __init__(
        self,
        dim: int,
        num_heads: int,
        mlp_width: Count = 32,
        init_c: Positive = 0.1,  # c starts here (learned)
        threshold: Positive = 512.0,  # L = |learned scale (from 1) x this|
        eps: Positive = 1e-6,
    ) -> None:
        super().__init__(dim, num_heads)
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
        q, k = self.field(q_pos).to(self.c.device), self.field(k_pos).to(self.c.device)
        rows = max(1, CHUNK_ELEMENTS // (k.shape[-1] * self.mlp[0].out_features))
        if rows >= q.shape[-1]:
            return self._bias_rows(q, k)
        # without gradients (evaluation at long lengths) the chunks alone bound the memory
        rows_of = (
            functools.partial(checkpoint, self._bias_rows, use_reentrant=False, preserve_rng_state=False)
            if torch.is_grad_enabled()
            else self._bias_rows
        )
        return torch.cat([rows_of(q[..., s : s + rows], k) for s in range(0, q.shape[-1], rows)], dim=-2)

    def _bias_rows(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """``[..., H, Lq, Lk]`` for query positions ``q`` and keys ``k``."""
        return self.mlp(self.normalized_distance(q, k).unsqueeze(-1)).movedim(-1, -3)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, mlp_width={self.mlp[0].out_features}, eps={self.eps}"
