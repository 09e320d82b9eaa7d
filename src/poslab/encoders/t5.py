"""``t5``: T5's bucketed relative position bias (Raffel et al. 2020, JMLR, §2.1).

Each (query, key) offset falls in one of ``num_buckets`` buckets — exact for
small distances, logarithmically wider up to ``max_distance``, one bucket for
everything beyond — and each head learns one scalar per bucket. Bucketing as
in the reference implementation (mesh-tensorflow / HF ``_relative_position_bucket``):
bidirectional models spend half the buckets on each direction; causal models
only look back (``bidirectional`` left ``None`` in the config follows the model).

T5 itself does not scale q·k by 1/√d (transformers#46946); here the bias is
added after SDPA's scaling, and being learned, it absorbs the difference.
"""

from __future__ import annotations

import math
from typing import Annotated

import torch
from torch import nn

from poslab.config.ranges import Count, Range
from poslab.encoders.base import PositionEncoder
from poslab.encoders.registry import register_encoder


def t5_buckets(relative: torch.Tensor, bidirectional: bool, num_buckets: int, max_distance: int) -> torch.Tensor:
    """Bucket index of each offset ``k − q`` (``relative``, integer valued)."""
    relative = relative.long()
    buckets = torch.zeros_like(relative)
    if bidirectional:
        num_buckets //= 2
        buckets += (relative > 0).long() * num_buckets
        distance = relative.abs()
    else:
        distance = (-relative).clamp(min=0)
    max_exact = num_buckets // 2
    is_small = distance < max_exact
    large = (
        max_exact
        + (
            torch.log(distance.float().clamp(min=1) / max_exact)
            / math.log(max_distance / max_exact)
            * (num_buckets - max_exact)
        ).long()
    )
    large = large.clamp(max=num_buckets - 1)
    return buckets + torch.where(is_small, distance, large)


@register_encoder("t5")
class T5Bias(PositionEncoder):
    paper = "Raffel et al. 2020"
    reads = "steps"

    def __init__(
        self,
        dim: int,
        num_heads: int,
        num_buckets: Annotated[int, Range(2)] = 32,
        max_distance: Count = 128,
        # None: follow the model (causal text: false = look back only; time series: true = both ways)
        bidirectional: bool | None = None,
    ) -> None:
        super().__init__(dim, num_heads)
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.bidirectional = bool(bidirectional)  # None: the model did not say; causal bucketing
        self.bias = nn.Embedding(num_buckets, num_heads)
        nn.init.zeros_(self.bias.weight)

    def relative_bias(self, offsets):
        buckets = t5_buckets(
            offsets.to(self.bias.weight.device), self.bidirectional, self.num_buckets, self.max_distance
        )
        return self.bias(buckets).movedim(-1, 0)  # [..., H] -> [H, ...]

    def flat_beyond(self) -> int:
        """Every distance from ``max_distance`` on falls in the last bucket of its direction."""
        return self.max_distance

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, num_buckets={self.num_buckets}, "
            f"max_distance={self.max_distance}, bidirectional={self.bidirectional}"
        )
