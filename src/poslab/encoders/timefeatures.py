"""``timefeatures``: GluonTS continuous time features through a linear layer.

Time-Series-Library's ``TimeFeatureEmbedding`` (``embed=timeF``): hour of day,
day of week, day of month, day of year — plus minute of hour for data finer
than hourly — each scaled linearly to [−0.5, 0.5], then ``Linear(F, D)``
without bias. Linear, not cyclic: 23:00 and 00:00 are at opposite ends.
"""

from __future__ import annotations

from torch import nn

from poslab.config.ranges import OptionalCount
from poslab.encoders.base import PositionEncoder
from poslab.encoders.registry import register_encoder
from poslab.positions.timestamps import feature_count, time_features


@register_encoder("timefeatures")
class TimeFeatures(PositionEncoder):
    paper = "Alexandrov et al. 2020"
    reads = "times"

    # step_seconds: None: the data's sampling step (adds minute of hour below one hour)
    def __init__(self, dim: int, num_heads: int, step_seconds: OptionalCount = None) -> None:
        super().__init__(dim, num_heads)
        self.step_seconds = step_seconds or 3600
        self.proj = nn.Linear(feature_count(self.step_seconds), dim, bias=False)

    def encode_input(self, x, pos):
        features = time_features(self.field(pos).to(x.device), self.step_seconds)
        return x + self.proj(features).to(x.dtype)
