"""``xpos``: RoPE with an exponential decay over distance (Sun et al. 2022, "A Length-Extrapolatable
Transformer", eq. 5-6).

Each rotation pair i carries a scale ζ_i = (i / (d/2) + γ) / (1 + γ), γ = 0.4.
The query at position n is rotated and multiplied by ζ_i^(n/B), the key at m
rotated and multiplied by ζ_i^(−m/B), B the ``scale_base`` (512): their score
is RoPE's times Π-wise ζ_i^((n−m)/B), a decay with distance for a causal model
(n ≥ m, ζ_i < 1) that still depends only on n − m. As in the reference code
(torchscale ``XPOS``) positions are centred before the exponent, which leaves
every score unchanged and keeps the scales near 1; ``layout`` defaults to the
reference's adjacent pairs.

Queries and keys are scaled in opposite directions: this encoder overrides
``rotate_query`` and ``rotate_key``; ``rotate`` alone is the rotation.

``blockwise``: the blockwise causal attention the paper evaluates xPos with (§3.3): blocks of the
training length (``max_len``, the data fills it), each query seeing its own block and the one before,
so at the training length it is plain causal attention and past it no query reads further back than
twice the training length.
"""

from __future__ import annotations

import torch

from poslab.config.ranges import Base, OptionalCount, Positive
from poslab.encoders.registry import register_encoder
from poslab.encoders.rope import RoPE
from poslab.encoders.rotary import LastInputCache, Layout
from poslab.errors import ConfigError


@register_encoder("xpos")
class XPos(RoPE):
    paper = "Sun et al. 2022"
    reads = "steps"
    context_extensions = ()  # the RoPE extensions are not defined for the decay term
    searched_extensions = ()
    length_driven_extensions = ()

    def __init__(
        self,
        dim: int,
        num_heads: int,
        base: Base = 10000.0,
        layout: Layout = "interleaved",  # the reference's adjacent pairs | half
        scale_base: Positive = 512.0,  # B: the score scales by ζ_i^((n−m)/B)
        gamma: Positive = 0.4,  # γ: ζ_i = (i/(d/2) + γ) / (1 + γ)
        blockwise: bool = False,  # blockwise causal attention, blocks of max_len tokens (the paper's evaluation)
        max_len: OptionalCount = None,  # None: the training context (the block size)
    ) -> None:
        super().__init__(dim, num_heads, base=base, layout=layout, max_len=max_len)
        if blockwise and max_len is None:
            raise ConfigError("xpos: blockwise attention needs max_len, the block size (the training context)")
        self.scale_base, self.gamma, self.blockwise = scale_base, gamma, blockwise
        pairs = self.rot_dim // 2
        zeta = (torch.arange(pairs, dtype=torch.float64) / pairs + gamma) / (1 + gamma)
        # ζ per channel, in the layout's pair order: adjacent pairs share one, or channel j pairs with j + d/2
        per_channel = zeta.repeat_interleave(2) if layout == "interleaved" else torch.cat((zeta, zeta))
        self.register_buffer("log_zeta", per_channel.log(), persistent=False)
        self._scales = LastInputCache()

    def scale(self, pos) -> torch.Tensor:
        """ζ^(n/B) per position and rotated channel, positions centred per sequence: ``[L, R]`` or
        ``[B, 1, L, R]``, float32."""

        def compute(steps: torch.Tensor) -> torch.Tensor:
            steps = steps.to(device=self.log_zeta.device, dtype=torch.float64)
            centre = torch.floor((steps.amin(-1, keepdim=True) + steps.amax(-1, keepdim=True)) / 2)
            power = (steps - centre) / self.scale_base
            scale = (power[..., None] * self.log_zeta).exp().float()
            return scale.unsqueeze(-3) if scale.dim() == 3 else scale

        return self._scales.get(self.field(pos), compute)

    def _scaled(self, x: torch.Tensor, pos, sign: float) -> torch.Tensor:
        rotated = self.rotate(x, pos)
        scale = self.scale(pos).to(x.device)
        scale = scale if sign > 0 else scale.reciprocal()
        rot = scale.shape[-1]
        head = (rotated[..., :rot].float() * scale).to(x.dtype)
        return head if rot == x.shape[-1] else torch.cat((head, rotated[..., rot:]), dim=-1)

    def rotate_query(self, x, pos):
        return self._scaled(x, pos, +1.0)

    def rotate_key(self, x, pos):
        return self._scaled(x, pos, -1.0)

    def attention_blocks(self) -> int | None:
        return self.max_len if self.blockwise else None

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, scale_base={self.scale_base}, gamma={self.gamma}, blockwise={self.blockwise}"
