"""``relative``: Shaw-style clipped relative positions as a per-head logits bias.

Shaw, Uszkoreit & Vaswani 2018, "Self-Attention with Relative Position
Representations": offsets are clipped to [−k, k] (eq. 5), each clipped offset
gets a learned representation. Here the representation is one scalar per head
(the bias form later used by Transformer-XL's and T5's simplifications),
added to the logits after SDPA's 1/√d scaling; offsets beyond ±``max_distance``
share the edge value.
"""

from __future__ import annotations

from torch import nn

from poslab.config.ranges import Count
from poslab.encoders.base import PositionEncoder
from poslab.encoders.registry import register_encoder


@register_encoder("relative")
class ClippedRelative(PositionEncoder):
    paper = "Shaw et al. 2018"
    reads = "steps"

    # max_distance: k: offsets beyond +-k share the edge value
    def __init__(self, dim: int, num_heads: int, max_distance: Count = 32) -> None:
        super().__init__(dim, num_heads)
        self.max_distance = max_distance
        self.bias = nn.Embedding(2 * max_distance + 1, num_heads)
        nn.init.zeros_(self.bias.weight)

    def relative_bias(self, offsets):
        index = offsets.to(self.bias.weight.device).round().long()
        index = index.clamp(-self.max_distance, self.max_distance) + self.max_distance
        return self.bias(index).movedim(-1, 0)  # [..., H] -> [H, ...]

    def flat_beyond(self) -> int:
        """Offsets are clipped to ±``max_distance``."""
        return self.max_distance

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, max_distance={self.max_distance}"
