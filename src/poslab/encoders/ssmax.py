"""``ssmax``: Scalable-Softmax (Nakanishi 2025, "Scalable-Softmax Is Superior for Attention", eq. 2).

Softmax over n scores flattens as n grows (its largest output tends to 0:
"attention fading"). SSMax raises the base to n: z_j ↦ n^(s·z_j) / Σ_t n^(s·z_t),
i.e. the logits multiplied by s·log n, with one learned s per head; the
query of token i, which attends to n_i keys (i + 1 under a causal mask, every
token otherwise, a class token too), is scaled by s_h·log n_i before the dot
product — the same as scaling its logits; a class token's query is scaled as
the others. No position of its own: alone it is NoPE with SSMax;
``rope+ssmax`` scales RoPE's queries.

``init_scale`` left ``None`` starts s at 1/log L, L the training context, so
the model starts as plain softmax at the training length (the paper learns s
from an initial value; it does not fix one). One s per head, shared by the
layers (the paper learns one per layer and head). ``bidirectional`` left
``None`` follows the model's attention, as the task tells it.
"""

from __future__ import annotations

import math
from typing import Annotated, Optional

import torch
from torch import nn

from poslab.config.ranges import POSITIVE, OptionalCount
from poslab.encoders.base import PositionEncoder
from poslab.encoders.registry import register_encoder


@register_encoder("ssmax")
class ScalableSoftmax(PositionEncoder):
    paper = "Nakanishi 2025"
    reads = None  # it counts the keys a query sees, not a position field
    sees_prefix = True  # a class token is a key every query sees, and a query scaled as the others

    def __init__(
        self,
        dim: int,
        num_heads: int,
        init_scale: Annotated[Optional[float], POSITIVE] = None,  # s at the start; None: 1/log L
        max_len: OptionalCount = None,  # L, the training context (the data fills it)
        bidirectional: bool | None = None,  # None: follow the model (causal: n_i = i + 1 keys)
    ) -> None:
        super().__init__(dim, num_heads)
        if init_scale is None:
            init_scale = 1.0 / math.log(max(max_len or 2, 2))
        self.init_scale, self.max_len = init_scale, max_len
        self.bidirectional = bool(bidirectional)
        self.scale = nn.Parameter(torch.full((num_heads,), float(init_scale)))

    def key_counts(self, length: int, device: torch.device) -> torch.Tensor:
        """n_i: the keys query i attends to, ``[L]`` float32 (i + 1 causal, L bidirectional)."""
        if self.bidirectional:
            return torch.full((length,), float(length), device=device)
        return torch.arange(1, length + 1, device=device, dtype=torch.float32)

    def rotate_query(self, x: torch.Tensor, pos) -> torch.Tensor:
        """``[B, H, L, Dh]`` queries times s_h · log n_i (eq. 2: the logits scaled by s log n)."""
        log_n = self.key_counts(x.shape[-2], x.device).log()
        factor = self.scale.view(-1, 1) * log_n  # [H, L]
        return (x.float() * factor[..., None]).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, init_scale={self.init_scale:.4g}, bidirectional={self.bidirectional}"
