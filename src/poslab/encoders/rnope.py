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
"""

from __future__ import annotations

from poslab.encoders.none import NoPosition
from poslab.encoders.registry import register_encoder
from poslab.encoders.rope import RoPE
from poslab.encoders.rotary import Layout
from poslab.ranges import Base, Count, OptionalCount


@register_encoder("rnope")
class RNoPE(RoPE):
    reads = "steps"

    def __init__(
        self,
        dim: int,
        num_heads: int,
        base: Base = 10000.0,
        layout: Layout = "half",  # half | interleaved, as rope
        max_len: OptionalCount = None,  # None: the training context (the RoPE extensions extend from it)
        nope_every: Count = 4,  # layers 3, 7, ... (counting from 0) attend without position
        window: OptionalCount = None,  # the RoPE layers' sliding window (RNoPE-SWA); None: global
    ) -> None:
        super().__init__(dim, num_heads, base=base, layout=layout, max_len=max_len, window=window)
        self.nope_every = nope_every
        self.nope = NoPosition(dim, num_heads)

    def for_layer(self, index: int):
        """Layer ``index`` (from 0) attends without position when ``index + 1`` is a multiple of ``nope_every``."""
        return self.nope if (index + 1) % self.nope_every == 0 else self

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, nope_every={self.nope_every}, window={self.window}"
