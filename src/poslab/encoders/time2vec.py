"""``time2vec``: Time2Vec (Kazemi et al. 2019, eq. 1) through a linear layer.

t2v(τ)[0] = ω₀τ + φ₀ and t2v(τ)[i] = sin(ω_i τ + φ_i) for i = 1..k, all ω, φ
learned. τ is in days; the periodic terms see absolute time (days since
2000-01-01, so they can lock onto daily / weekly phase), the linear term the
time since the sequence's first step (absolute time would put a trend of
thousands of days into every token). The ω_i start at 2π / periods spread
log-uniformly from half a day to a year, φ at zero.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from poslab.config.ranges import Count
from poslab.encoders.base import PositionEncoder
from poslab.encoders.registry import register_encoder
from poslab.encoders.rotary import rotation_angles

EPOCH_2000 = 946_684_800  # 2000-01-01T00:00:00Z in Unix seconds
DAY = 86_400


@register_encoder("time2vec")
class Time2Vec(PositionEncoder):
    paper = "Kazemi et al. 2019"
    reads = "times"

    def __init__(self, dim: int, num_heads: int, k: Count = 16) -> None:
        super().__init__(dim, num_heads)
        self.k = k
        periods = torch.logspace(math.log10(0.5), math.log10(365.25), k)
        self.omega = nn.Parameter(2 * math.pi / periods)
        self.phi = nn.Parameter(torch.zeros(k))
        self.linear = nn.Parameter(torch.tensor([1.0 / 7, 0.0]))  # ω₀ (per day), φ₀
        self.proj = nn.Linear(k + 1, dim, bias=False)

    def features(self, times: torch.Tensor) -> torch.Tensor:
        seconds = times.long()
        absolute = (seconds - EPOCH_2000).double() / DAY
        relative = ((seconds - seconds[..., :1]).double() / DAY).float()
        # ω·τ reaches 10⁵ rad (half-day period, 24 years of days): formed in float64 and reduced mod 2π first
        periodic = torch.sin(rotation_angles(absolute, self.omega) + self.phi)
        trend = self.linear[0] * relative + self.linear[1]
        return torch.cat((trend[..., None], periodic), dim=-1)

    def encode_input(self, x, pos):
        return x + self.proj(self.features(self.field(pos).to(x.device))).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, k={self.k}"
