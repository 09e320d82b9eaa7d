"""``learned``: an absolute table of ``max_len`` learned embeddings.

GPT-2 / BERT style (and ViT's 1D table): position p gets row p. There is no
row past ``max_len − 1``, so a longer input is an error that names
``max_len`` rather than an IndexError, and length extrapolation records why
it cannot run.
"""

from __future__ import annotations

import torch
from torch import nn

from poslab.config.ranges import NonNegative, OptionalCount
from poslab.encoders.base import PositionEncoder
from poslab.encoders.registry import register_encoder
from poslab.errors import PoslabError
from poslab.positions import readable, steps_end


def init_table(table: torch.Tensor, std: float) -> None:
    """ViT's truncated-normal start (timm ``trunc_normal_(std=.02)``); std 0 starts at zeros (the truncation
    would divide by it)."""
    if std > 0:
        nn.init.trunc_normal_(table, std=std)
    else:
        nn.init.zeros_(table)


class PositionOutOfRange(PoslabError):
    """A position past what the encoder can represent (e.g. a learned table)."""


@register_encoder("learned")
class Learned(PositionEncoder):
    paper = "Devlin et al. 2019"
    reads = "steps"

    # max_len: None: the training context (or data.random_positions when set)
    def __init__(self, dim: int, num_heads: int, max_len: OptionalCount = None, init_std: NonNegative = 0.02) -> None:
        super().__init__(dim, num_heads)
        if max_len is None:
            raise PoslabError("learned needs encoder.max_len (the longest position it will see)")
        self.max_len = int(max_len)
        self.table = nn.Embedding(self.max_len, dim)
        nn.init.normal_(self.table.weight, std=init_std)

    def encode_input(self, x, pos):
        steps = self.field(pos).to(x.device)
        # The range check reads the data's stated bound (or the values where that is free), never the device.
        end = steps_end(pos)
        if end is not None and end > self.max_len:
            raise PositionOutOfRange(
                f"learned: position {end - 1} is past encoder.max_len={self.max_len} "
                f"(a sequence of {end} tokens); train with a larger encoder.max_len or use another encoder"
            )
        if readable(steps):
            if steps.is_floating_point() and not torch.equal(steps, steps.round()):
                raise PoslabError("learned positions must be integers")
            if steps.numel() and int(steps.min()) < 0:
                raise PositionOutOfRange(f"learned: negative position {int(steps.min())}")
        return x + self.table(steps.long()).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, max_len={self.max_len}"
