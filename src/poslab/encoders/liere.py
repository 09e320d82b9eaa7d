"""``liere`` / ``liere3d``: Lie group relative position encodings (Ostmeier et al. 2024, "LieRE:
Generalizing Rotary Position Encodings", §3 and the reference code).

A learned skew-symmetric generator A_k per coordinate axis (and per head)
turns a position p into the rotation R(p) = exp(Σ_k p_k·A_k) (the matrix
exponential of an element of so(d)); queries and keys are multiplied by the
rotation of their own position, so a score reads q_i·R(p_i)ᵀR(p_j)·k_j. With
commuting generators that is R(p_j − p_i): RoPE (2 × 2 blocks with fixed
angles) is the special case; learned dense generators need not commute, which
is LieRE's extra freedom. Generators are A = U − Uᵀ from the strictly upper
triangle U of raw parameters drawn U[0, 2π), as in the reference;
``block_size`` < head_dim makes them block-diagonal (the paper's smaller
bases, cheaper exponentials). Positions are scaled by the training grid
(``grid_size``, and ``frames`` for ``liere3d``) as the reference scales them:
``position_scale=linspace`` (the default) maps the training grid's n patch
indices onto [0, 1], index i to i/(n − 1), which is the reference's
``torch.linspace(0, 1, n)`` per axis (StanfordMIMI/LieRE,
``models/rope_vit.py``, ``PositionEncoderBase.forward``); ``extent`` divides by
n instead (i/n), this encoder's earlier scaling. Raw patch indices with the
reference's initialisation would turn each token by several radians. On
another grid (m patches, raw coordinates) both go on past 1 at the training
spacing, where the reference spreads m points over [0, m/n].

One set of generators per layer by default, as the reference trains
(``rotary_embedding_per_layer: True`` in its ``imagenet_224.yaml`` and
``cifar100.yaml``); ``per_layer=false`` shares one set across the layers.

``liere`` reads ``coords`` (row, col: vision, video frames' cells);
``liere3d`` reads ``coords3d`` (frame, row, col: video).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import nn

from poslab.config.ranges import OptionalCount, OptionalGrid
from poslab.encoders.base import PositionEncoder
from poslab.encoders.layer_views import LayerViews
from poslab.encoders.registry import register_encoder
from poslab.errors import ConfigError
from poslab.nn.precision import full_precision


@register_encoder("liere")
class LieRE(LayerViews, PositionEncoder):
    paper = "Ostmeier et al. 2024"
    reads = "coords"
    axes = 2

    def __init__(
        self,
        dim: int,
        num_heads: int,
        block_size: OptionalCount = None,  # None: head_dim (dense generators, the reference); a divisor: block-diagonal
        per_head: bool = True,  # one set of generators per head (false: shared, as the reference's listing)
        grid_size: OptionalGrid = None,  # None: the training patch grid; positions are scaled by it
        position_scale: Literal["linspace", "extent"] = "linspace",  # i/(n-1), the reference's | i/n
        per_layer: bool = True,  # one set of generators per layer, as the reference trains (false: one shared)
        depth: OptionalCount = None,  # None: the model's depth (the data fills it); sets per_layer's count
    ) -> None:
        super().__init__(dim, num_heads)
        self.position_scale = position_scale
        self.per_layer, self.sets = per_layer, (depth or 1) if per_layer else 1
        self.block_size = block_size or self.head_dim
        if self.head_dim % self.block_size or self.block_size < 2:
            raise ConfigError(f"{self.name}: block_size={block_size} must divide head_dim={self.head_dim} (≥ 2)")
        self.per_head = per_head
        self.extent = self._extent(grid_size)
        divisors = [max(n - 1.0, 1.0) if position_scale == "linspace" else n for n in self.extent]
        # on the module's device, so a forward pass copies nothing from the host
        self.register_buffer("scale", torch.tensor(divisors), persistent=False)
        heads = num_heads if per_head else 1
        blocks = self.head_dim // self.block_size
        shape = (self.sets, heads, self.axes, blocks, self.block_size, self.block_size)
        self.raw = nn.Parameter(torch.rand(*shape) * 2 * math.pi)

    def _extent(self, grid_size) -> tuple[float, ...]:
        if grid_size is None:
            raise ConfigError(f"{self.name} needs encoder.grid_size (the training patch grid)")
        return tuple(float(g) for g in grid_size)

    def generators(self) -> torch.Tensor:
        """Skew-symmetric ``[heads, axes, blocks, b, b]`` of this layer's set: U − Uᵀ of the strict upper
        triangle."""
        upper = self.raw[self.layer].triu(diagonal=1)
        return upper - upper.transpose(-1, -2)

    def rotations(self, pos) -> torch.Tensor:
        """exp(Σ_k p_k·A_k) per token: ``[heads, L, blocks, b, b]`` (``[B, heads, L, …]`` for per-sample positions)."""
        coords = self.field(pos).to(self.raw.device, torch.float32) / self.scale
        # float32 under bf16 autocast too: matrix_exp has no autocast rule and returns NaNs in bf16
        with full_precision(self.raw.device):
            # Σ_k p_k·A_k: positions [(B,) L, axes] against generators [heads, axes, blocks, b, b]
            generator = torch.einsum("...la,haxij->...hlxij", coords, self.generators())
            return torch.linalg.matrix_exp(generator.contiguous())

    def rotate(self, x: torch.Tensor, pos) -> torch.Tensor:
        rotation = self.rotations(pos)
        blocks = x.float().unflatten(-1, (-1, self.block_size))  # [B, H, L, blocks, b]
        with full_precision(x.device):
            out = torch.einsum("...lxij,...lxj->...lxi", rotation, blocks)
        return out.flatten(-2).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, block_size={self.block_size}, per_head={self.per_head}, sets={self.sets}"


@register_encoder("liere3d")
class LieRE3D(LieRE):
    paper = "Ostmeier et al. 2024"
    reads = "coords3d"
    axes = 3

    def __init__(
        self,
        dim: int,
        num_heads: int,
        block_size: OptionalCount = None,  # None: head_dim (dense generators); a divisor: block-diagonal
        per_head: bool = True,  # one set of generators per head
        grid_size: OptionalGrid = None,  # None: the training patch grid
        frames: OptionalCount = None,  # None: the training clip's frame count; positions are scaled by grid and frames
        position_scale: Literal["linspace", "extent"] = "linspace",  # i/(n-1), the reference's | i/n
        per_layer: bool = True,  # one set of generators per layer, as the reference trains
        depth: OptionalCount = None,  # None: the model's depth (the data fills it)
    ) -> None:
        self._frames = frames
        super().__init__(dim, num_heads, block_size=block_size, per_head=per_head, grid_size=grid_size,
                         position_scale=position_scale, per_layer=per_layer, depth=depth)  # fmt: skip

    def _extent(self, grid_size) -> tuple[float, ...]:
        if self._frames is None:
            raise ConfigError("liere3d needs encoder.frames (the training clip's frame count)")
        return (float(self._frames), *super()._extent(grid_size))
