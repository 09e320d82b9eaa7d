"""``comrope``: rotary position encoding with trainable commuting angle matrices (Yu et al. 2025, "ComRoPE:
Scalable and Robust Rotary Position Embedding Parameterized by Trainable Commuting Angle Matrices", CVPR,
arXiv 2506.03737, §4, eqs. 9 and 10; reference: Longin-Yu/ComRoPE, ``model.py``).

LieRE's rotation R(p) = exp(Σ_i p_i·A_i) (:mod:`poslab.encoders.liere`) with block-diagonal angle matrices
A_i = diag(B_i1 … B_im) whose blocks commute, so that R(p)ᵀR(p') = R(p' − p) and a score depends on the
offset alone, as RoPE's does (the paper's Theorem 1; LieRE's dense generators do not commute). Two ways to
make them commute, each the reference's module:

* ``ap`` (axis-partition, eq. 9, ``ComRoPEAPAttention``): block j belongs to axis j mod N,
  B_ij = P_j − P_jᵀ there and 0 elsewhere;
* ``ld`` (linearly dependent, eq. 10, ``ComRoPELDAttention``): every axis scales one matrix,
  B_ij = θ_ij (P_j − P_jᵀ), with θ_ij trained per axis and block.

The P_j are drawn N(0, ``init_std``²) per head, θ from N(0, 1), as the reference initialises them. The
reference scales a patch's coordinate to (i + ½)/n; commuting rotations cancel the common ½/n, so this is
``position_scale=extent`` (i/n). One set per layer, as every layer of the reference's ViT has its own.
With ``block_size=2`` both reduce to RoPE with learned frequencies (``ld``: RoPE-Mixed's directions).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from poslab.config.ranges import Count, OptionalCount, OptionalGrid, Positive
from poslab.encoders.liere import LieRE
from poslab.encoders.registry import register_encoder
from poslab.errors import ConfigError

Variant = Literal["ap", "ld"]


@register_encoder("comrope")
class ComRoPE(LieRE):
    paper = "Yu et al. 2025"

    def __init__(
        self,
        dim: int,
        num_heads: int,
        variant: Variant = "ld",  # ld (eq. 10: a matrix per block, scaled per axis) | ap (eq. 9: blocks split by axis)
        block_size: Count = 4,  # b: the blocks' size (2: RoPE with learned frequencies)
        init_std: Positive = 1.0,  # the spread of the raw matrices P (the reference's default)
        grid_size: OptionalGrid = None,  # None: the training patch grid; positions are scaled by it
        per_layer: bool = True,  # one set per layer, as the reference (false: one shared)
        depth: OptionalCount = None,  # None: the model's depth (the data fills it)
    ) -> None:
        super().__init__(dim, num_heads, block_size=block_size, per_head=True, grid_size=grid_size,
                         position_scale="extent", per_layer=per_layer, depth=depth)  # fmt: skip
        blocks = self.head_dim // self.block_size
        if variant == "ap" and blocks < self.axes:
            raise ConfigError(
                f"comrope: variant=ap gives each of the {self.axes} axes its own blocks, but block_size="
                f"{block_size} leaves {blocks} in a head of {self.head_dim} "
                f"(choose block_size <= {self.head_dim // self.axes})"
            )
        self.variant, self.init_std = variant, init_std
        self.raw = nn.Parameter(torch.randn(self.sets, num_heads, blocks, self.block_size, self.block_size) * init_std)
        if variant == "ld":
            self.multiplier = nn.Parameter(torch.randn(self.sets, self.axes, blocks))
        else:  # block j turns with axis j mod N
            owner = torch.arange(blocks) % self.axes
            self.register_buffer(
                "owned", (owner[None, :] == torch.arange(self.axes)[:, None]).float(), persistent=False
            )

    def generators(self) -> torch.Tensor:
        """The angle matrices ``[heads, axes, blocks, b, b]`` of this layer's set; they commute."""
        raw = self.raw[self.layer]
        skew = (raw - raw.transpose(-1, -2))[:, None]  # [heads, 1, blocks, b, b]
        weight = self.multiplier[self.layer] if self.variant == "ld" else self.owned  # [axes, blocks]
        return skew * weight[None, :, :, None, None]

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, variant={self.variant}"
