"""``cope``: Contextual Position Encoding (Golovneva et al. 2024, "Contextual Position Encoding: Learning
to Count What's Important", eq. 3-5 and the paper's code listing).

A query counts the keys between it and each key through gates computed from
the attention logits: g_ij = σ(q_i·k_j / √d), p_ij = Σ_{t=j..i} g_it (eq. 3),
a fractional position that advances only at the tokens the gates select
(words, sentences, a chosen symbol). Position embeddings e[0 … P−1] are
interpolated at p_ij (eq. 4, p clamped at P − 1) and the logits gain
q_i·e[p_ij] (eq. 5), computed as the listing does: q·e at every integer
position once, then gathered at ⌊p⌋ and ⌈p⌉ and mixed. One table of
``head_dim × npos_max`` values, zero-initialised as in the listing, shared by
heads and layers (the paper: one per layer).

It acts through the ``content_bias`` hook: it needs the logits, so attention
computes them explicitly for this encoder (an ``L × L`` tensor per head, the
cost the fused kernels avoid). On bidirectional attention p_ij counts the
gates between i and j on either side, the symmetric reading of eq. 3.
"""

from __future__ import annotations

from typing import Annotated

import torch
from torch import nn

from poslab.config.ranges import Range
from poslab.encoders.base import PositionEncoder
from poslab.encoders.registry import register_encoder


@register_encoder("cope")
class CoPE(PositionEncoder):
    paper = "Golovneva et al. 2024"
    reads = None  # positions come from the content, not from the data

    # npos_max: P: contextual positions are clamped at P - 1 (the table has P entries per channel)
    def __init__(self, dim: int, num_heads: int, npos_max: Annotated[int, Range(2)] = 64) -> None:
        super().__init__(dim, num_heads)
        self.npos_max = npos_max
        self.pos_emb = nn.Parameter(torch.zeros(self.head_dim, npos_max))

    def positions(self, logits: torch.Tensor) -> torch.Tensor:
        """p_ij = Σ gates between key j and query i, inclusive (eq. 3), in [0, ``npos_max − 1``].

        The counts are differences of cumulative sums. A GPU's parallel scan adds in another order than the
        sequential one, so a count that is 0 can come out as −1 ulp, whose floor (−1) would index before
        the table: clamped at 0 as well as at the table's end."""
        return gate_counts(torch.sigmoid(logits)).clamp(min=0, max=self.npos_max - 1)

    def content_bias(self, q: torch.Tensor, k: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        pos = self.positions(logits)
        floor = pos.floor()
        weight = pos - floor  # eq. 4: e[p] = (p − ⌊p⌋)·e[⌈p⌉] + (1 − p + ⌊p⌋)·e[⌊p⌋]
        per_position = q.float() @ self.pos_emb.float()  # [B, H, Lq, P]: q·e at every integer position
        at_floor = per_position.gather(-1, floor.long())
        at_ceil = per_position.gather(-1, pos.ceil().long())
        return at_ceil * weight + at_floor * (1 - weight)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, npos_max={self.npos_max}"


def gate_counts(gates: torch.Tensor) -> torch.Tensor:
    """Σ of ``gates`` (``[..., Lq, Lk]``, masked keys 0) from key j to query i inclusive, either side of i."""
    before = gates.flip(-1).cumsum(-1).flip(-1)  # Σ_{t ≥ j}: the listing's count, keys j … i when causal
    after = gates.cumsum(-1)  # Σ_{t ≤ j}
    rows = torch.arange(gates.shape[-2], device=gates.device)[:, None]
    cols = torch.arange(gates.shape[-1], device=gates.device)[None, :]
    own = gates.diagonal(dim1=-2, dim2=-1)[..., None]  # g_ii
    at_query = lambda sums: sums.diagonal(dim1=-2, dim2=-1)[..., None]  # noqa: E731  (Σ up to / from i)
    return torch.where(cols <= rows, before - at_query(before) + own, after - at_query(after) + own)
