"""``alibi``: Attention with Linear Biases (Press et al. 2022, ICLR).

No position embedding at all: each head h adds −m_h·(i − j) to the logit of
query i for key j (§3). Slopes follow the paper's function: for H a power of
two the geometric series starting at 2^(−8/H) with the same ratio; otherwise
the series of the closest lower power of two followed by every other slope of
the next power's series (the official ``get_slopes``; mlx#343 and
transformers#28380 got this wrong). ``bidirectional=True`` uses the symmetric
−m_h·|i − j| form for models that attend both ways; left ``None`` in the
config, the task sets it from the model's attention.

The bias is added after the ``q·k/√d`` scaling (as in the paper's fairseq code).
"""

from __future__ import annotations

import math

import torch

from poslab.encoders.base import PositionEncoder
from poslab.encoders.registry import register_encoder


def alibi_slopes(num_heads: int) -> list[float]:
    """Press et al.'s slopes: 8 heads -> 1/2, 1/4, …, 1/256."""

    def power_of_two(n: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(num_heads).is_integer():
        return power_of_two(num_heads)
    closest = 2 ** math.floor(math.log2(num_heads))
    return power_of_two(closest) + alibi_slopes(2 * closest)[0::2][: num_heads - closest]


@register_encoder("alibi")
class ALiBi(PositionEncoder):
    paper = "Press et al. 2022"
    reads = "steps"

    # bidirectional: None: follow the model (causal text: false; time series: true = symmetric -slope * |i - j|)
    def __init__(self, dim: int, num_heads: int, bidirectional: bool | None = None) -> None:
        super().__init__(dim, num_heads)
        self.bidirectional = bool(bidirectional)  # None: the model did not say; the causal form
        self.register_buffer("slopes", torch.tensor(alibi_slopes(num_heads)), persistent=False)

    def relative_bias(self, offsets):
        # causal: k − q ≤ 0 for every visible key, so m·(k − q) = −m·(i − j)
        distance = -offsets.abs() if self.bidirectional else offsets
        return self.slopes.view(-1, *([1] * offsets.dim())) * distance.to(self.slopes.device)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, bidirectional={self.bidirectional}"
