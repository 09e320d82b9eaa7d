"""The toy network: token embedding, poslab's backbone (where the encoder acts), mean pooling, a linear head."""

from __future__ import annotations

import torch
from torch import nn

from poslab.config.ranges import Depth, Heads, Width
from poslab.encoders.base import PositionEncoder
from poslab.nn.backbone import Transformer
from poslab.positions import Positions


class ToyNet(nn.Module):
    #: Arguments the code supplies (the encoder, sizes from the data): not config keys.
    SUPPLIED = ("encoder", "vocab", "num_classes")

    def __init__(
        self, encoder: PositionEncoder, *, vocab: int, num_classes: int, dim: Width, depth: Depth, num_heads: Heads
    ) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.backbone = Transformer(encoder, dim=dim, depth=depth, num_heads=num_heads)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, tokens: torch.Tensor, pos: Positions) -> torch.Tensor:
        """``[B, L]`` tokens -> ``[B, num_classes]`` logits."""
        return self.head(self.backbone(self.embed(tokens), pos).mean(dim=1))
