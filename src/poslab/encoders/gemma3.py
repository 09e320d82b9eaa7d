"""``gemma3``: Gemma 3's local and global layers (Gemma Team 2025, "Gemma 3 Technical Report", §2.1-2.2).

Five local layers to one global: the local layers attend within a sliding window with RoPE at base
10 000, every ``global_every``-th layer (5, 11, … counting from 0) attends to every token with RoPE
at base 1 000 000 — per-layer bases, so the global layers' slow frequencies span long contexts while
the local layers keep the usual ladder. The report extends the context by rescaling the global
layers' positions only (positional interpolation, factor 8): a context extension here acts on the
global layers, the local ones see no position past their window anyway.

``window`` left ``None`` is a quarter of the training context (the report's 1,024 of 32,768 tokens
would be 2 tokens at 64; Gemma 2 had 4,096 of 8,192); ``max_len`` the data fills.
"""

from __future__ import annotations

import copy

from poslab.config.ranges import Base, Count, OptionalCount
from poslab.encoders.registry import register_encoder
from poslab.encoders.rope import RoPE
from poslab.encoders.rotary import Layout
from poslab.errors import ConfigError


@register_encoder("gemma3")
class Gemma3(RoPE):
    paper = "Gemma Team 2025"
    reads = "steps"

    def __init__(
        self,
        dim: int,
        num_heads: int,
        base: Base = 10000.0,  # the local layers' RoPE base
        global_base: Base = 1_000_000.0,  # the global layers' RoPE base
        global_every: Count = 6,  # layers 5, 11, ... (counting from 0) are global: 5 local to 1
        window: OptionalCount = None,  # the local layers' sliding window; None: a quarter of max_len
        layout: Layout = "half",  # half | interleaved, as rope
        max_len: OptionalCount = None,  # None: the training context
    ) -> None:
        if window is None:
            if max_len is None:
                raise ConfigError("gemma3: window=None is a quarter of max_len; give max_len or a window")
            window = max(1, max_len // 4)
        super().__init__(dim, num_heads, base=base, layout=layout, max_len=max_len, window=window)
        self.global_base, self.global_every = global_base, global_every
        self.global_layers = RoPE(dim, num_heads, base=global_base, layout=layout, max_len=max_len)

    def for_layer(self, index: int):
        """Layer ``index`` (from 0) is global when ``index + 1`` is a multiple of ``global_every``."""
        return self.global_layers if (index + 1) % self.global_every == 0 else self

    def extended(self, kind: str, factor: float) -> Gemma3:
        """The global layers extended by ``kind``; the local layers as trained (the report's recipe)."""
        clone = copy.copy(self)
        clone._modules = dict(self._modules)
        clone.global_layers = self.global_layers.extended(kind, factor)
        return clone

    def search_extension(self, kind, factor, fitness, budget):
        """The global layers' searched extension, scored with the local layers as trained."""

        def with_global(layers: RoPE) -> Gemma3:
            clone = copy.copy(self)
            clone._modules = dict(self._modules)
            clone.global_layers = layers
            return clone

        def scored(layers: RoPE, *objective: str) -> float:
            return fitness(with_global(layers), *objective)

        found, result = self.global_layers.search_extension(kind, factor, scored, budget)
        return with_global(found), result

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, global_base={self.global_base}, global_every={self.global_every}, "
            f"window={self.window}"
        )
