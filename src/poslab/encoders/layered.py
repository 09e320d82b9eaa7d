"""Per-layer encoders: a pattern of registered encoders cycled over the depth (``encoder=rope,rope,rope,none``).

Layer ``i`` uses ``pattern[i % len(pattern)]`` for its attention hooks
(rotation, bias, content bias), so ``rope,rope,rope,none`` on 8 layers puts a
layer without position at layers 3 and 7, as Llama 4's interleaved NoPE layers
(iRoPE) and Cohere's RNoPE hybrid (Yang et al. 2025) do. Layers that name the
same encoder share one instance (one bias per forward pass, as in a plain
model); an input embedding among the members is added once, at the input.
Built by the registry for any name with a ``,``; options per distinct member
(``encoder.rope.base=500``). Outside the backbone (``poslab show``, the
similarity figure) a hybrid shows its first layer's encoder.
"""

from __future__ import annotations

import torch

from poslab.encoders.base import PositionEncoder
from poslab.encoders.composite import MemberEncoder
from poslab.errors import ConfigError


class LayeredEncoder(MemberEncoder):
    def __init__(self, dim: int, num_heads: int, members: dict[str, PositionEncoder], pattern: list[str]) -> None:
        unknown = [p for p in pattern if p not in members]
        if not pattern or unknown:
            raise ConfigError(f"per-layer pattern {pattern} names encoders without a member: {unknown}")
        super().__init__(dim, num_heads, members)
        self.pattern = list(pattern)
        self.name = ",".join(pattern)

    def for_layer(self, index: int) -> PositionEncoder:
        return self.members[self.pattern[index % len(self.pattern)]]

    def encode_input(self, x: torch.Tensor, pos) -> torch.Tensor:
        for member in self.members.values():
            x = member.encode_input(x, pos)
        return x

    # Outside the backbone a hybrid acts as its first layer (the backbone asks for_layer instead).
    def rotate(self, x, pos):
        return self.for_layer(0).rotate(x, pos)

    def rotate_query(self, x, pos):
        return self.for_layer(0).rotate_query(x, pos)

    def rotate_key(self, x, pos):
        return self.for_layer(0).rotate_key(x, pos)

    def attention_bias(self, q_pos, k_pos):
        return self.for_layer(0).attention_bias(q_pos, k_pos)

    def content_bias(self, q, k, logits):
        first = self.for_layer(0)
        return first.content_bias(q, k, logits) if first.uses("content_bias") else None

    def input_bias(self, x, layer):
        member = self.for_layer(layer)
        return member.input_bias(x, layer) if member.uses("input_bias") else None

    def attention_logits(self, q, k, x, layer):
        member = self.for_layer(layer)
        return member.attention_logits(q, k, x, layer) if member.uses("attention_logits") else None

    def attention_weights(self, logits):
        first = self.for_layer(0)
        return first.attention_weights(logits) if first.uses("attention_weights") else None

    def with_members(self, members: dict[str, PositionEncoder]) -> LayeredEncoder:
        return LayeredEncoder(self.dim, self.num_heads, members, self.pattern)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, pattern={','.join(self.pattern)}"
