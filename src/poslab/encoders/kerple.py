"""``kerple``: KERPLE, a learned kernel of the distance added to the logits (Chi et al. 2022, NeurIPS).

"KERPLE: Kernelized Relative Positional Embedding for Length Extrapolation",
§4 (eq. 5 and 6), conditionally positive definite kernels made into biases:

* ``log`` (the paper's best): b(m, n) = −r₁·log(1 + r₂·|m − n|),
* ``power``: b(m, n) = −r₁·|m − n|^r₂ with r₂ ∈ (0, 2],

r₁, r₂ > 0 learned per head. As in the reference code (chijames/KERPLE,
``megatron/mpu/layers.py``, ``ParallelKerpleLog`` / ``ParallelKerplePower``)
they start uniform in (0, 2) and (0, 1) for ``log`` and are held at least
``eps`` (0.01; the power's exponent at most 2) by clamping the *stored*
values in place before each use, so a coefficient at the bound is used as it
is stored and keeps its gradient: a head that starts below ``eps`` trains on
from ``eps`` (a clamp applied only where the value is used would give it zero
gradient for good). The bias depends on the offset alone, so it takes the
blocked (Toeplitz) kernels.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from poslab.config.ranges import Positive
from poslab.encoders.base import PositionEncoder
from poslab.encoders.registry import register_encoder


@register_encoder("kerple")
class Kerple(PositionEncoder):
    paper = "Chi et al. 2022"
    reads = "steps"  # the Positions field it uses: it fits every modality whose data provides it

    # eps: r1, r2 are held at least this (the reference's clamp)
    # variant: log (the paper's best) | power
    def __init__(
        self, dim: int, num_heads: int, variant: Literal["log", "power"] = "log", eps: Positive = 0.01
    ) -> None:
        super().__init__(dim, num_heads)
        self.variant, self.eps = variant, eps
        # the reference's initialisation: r1 ~ U(0, 2), r2 ~ U(0, 1) (log) / r1 ~ U(0, 1), r2 ~ U(0, 2) (power)
        r1_scale, r2_scale = (2.0, 1.0) if variant == "log" else (1.0, 2.0)
        self.r1 = nn.Parameter(torch.rand(num_heads) * r1_scale)
        self.r2 = nn.Parameter(torch.rand(num_heads) * r2_scale)

    def coefficients(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The r₁, r₂ the bias uses, the stored values clamped in place first (the reference's
        ``self.bias_p.data = self.bias_p.data.clamp(min=self.eps)``): at least ``eps``, r₂ of the power
        kernel at most 2."""
        with torch.no_grad():
            self.r1.clamp_(min=self.eps)
            self.r2.clamp_(min=self.eps, max=2.0 if self.variant == "power" else None)
        return self.r1, self.r2

    def relative_bias(self, offsets):
        """−r₁·log(1 + r₂·|d|) or −r₁·|d|^r₂ for each offset d = k − q, per head: ``[H, *offsets.shape]``."""
        r1, r2 = (c.view(-1, *([1] * offsets.dim())) for c in self.coefficients())
        distance = offsets.abs().to(r1.dtype)
        if self.variant == "log":
            return -r1 * torch.log1p(r2 * distance)
        return -r1 * distance.pow(r2)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, variant={self.variant}, eps={self.eps}"
