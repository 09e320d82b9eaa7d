"""``rnope``: RoPE in most layers, no position in every ``nope_every``-th (layers 3, 7, … by default).

The hybrid of Yang et al. 2025 ("Rope to Nope and Back Again: A New Hybrid
Attention Strategy", Cohere's RNoPE) and of Llama 4's interleaved NoPE layers
(iRoPE): one layer in four attends without position, which those papers find
retrieves better past the training length. Their models also give the RoPE
layers a sliding window (Cohere's RNoPE-SWA; SWAN-GPT): ``window`` = W puts
the RoPE layers on W-token sliding windows and keeps the NoPE layers global. Any pattern of registered encoders per
layer is ``encoder=a,a,a,b`` (:mod:`poslab.encoders.layered`); this preset is
RoPE with its options (and its context extensions
at evaluation, in the RoPE layers) plus the period.

One more extension, ``swan``: SWAN-GPT's log scaling at inference (Puvvada et al. 2025, §2.2 and
App. D): the global NoPE layers' logits for the query at position n multiplied by
log_a(a + n) = ln(a + n) / ln a, which is 1 at the first token and grows slowly, so those layers do
not flatten over long contexts; the RoPE layers are left as trained. The paper fits a after training
and does not publish it; ``log_scale_base`` left ``None`` takes a = the training context.
"""

from __future__ import annotations

import copy
import math
from typing import Annotated, Optional

import torch

from poslab.config.ranges import Base, Count, OptionalCount, Range
from poslab.encoders.none import NoPosition
from poslab.encoders.registry import register_encoder
from poslab.encoders.rope import RoPE
from poslab.encoders.rotary import Layout
from poslab.errors import ConfigError


class LogScaledNoPE(NoPosition):
    """No position, the query at step n scaled by log_a(a + n) (SWAN-GPT's NoPE layers at inference)."""

    reads = "steps"

    def __init__(self, dim: int, num_heads: int, log_base: float) -> None:
        super().__init__(dim, num_heads)
        self.log_base = log_base

    def rotate_query(self, x: torch.Tensor, pos) -> torch.Tensor:
        steps = self.field(pos).to(device=x.device, dtype=torch.float32)
        scale = torch.log(self.log_base + steps) / math.log(self.log_base)  # [L] or [B, L]
        scale = scale[..., None] if scale.dim() == 1 else scale[:, None, :, None]
        return (x.float() * scale).to(x.dtype)


@register_encoder("rnope")
class RNoPE(RoPE):
    paper = "Yang et al. 2025"
    reads = "steps"
    context_extensions = (*RoPE.context_extensions, "swan")

    def __init__(
        self,
        dim: int,
        num_heads: int,
        base: Base = 10000.0,
        layout: Layout = "half",  # half | interleaved, as rope
        max_len: OptionalCount = None,  # None: the training context (the RoPE extensions extend from it)
        nope_every: Count = 4,  # layers 3, 7, ... (counting from 0) attend without position
        window: OptionalCount = None,  # the RoPE layers' sliding window (RNoPE-SWA); None: global
        log_scale_base: Annotated[
            Optional[float], Range(1, low_open=True)
        ] = None,  # a in the swan extension's log_a(a + n); None: the training context
    ) -> None:
        super().__init__(dim, num_heads, base=base, layout=layout, max_len=max_len, window=window)
        self.nope_every, self.log_scale_base = nope_every, log_scale_base
        self.nope = NoPosition(dim, num_heads)

    def for_layer(self, index: int):
        """Layer ``index`` (from 0) attends without position when ``index + 1`` is a multiple of ``nope_every``."""
        return self.nope if (index + 1) % self.nope_every == 0 else self

    def extended(self, kind: str, factor: float) -> RNoPE:
        """RoPE's extensions in the RoPE layers; ``swan``: the NoPE layers' log scaling (any factor)."""
        if kind != "swan":
            return super().extended(kind, factor)
        base = self.log_scale_base or self.max_len
        if base is None or base <= 1:  # the training context of one token: ln a = 0
            raise ConfigError("rnope: the swan extension needs log_scale_base > 1 or max_len (the training context)")
        clone = copy.copy(self)
        clone._modules = dict(self._modules)
        clone.nope = LogScaledNoPE(self.dim, self.num_heads, float(base))
        return clone

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, nope_every={self.nope_every}, window={self.window}"
