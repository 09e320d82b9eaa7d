"""``stickbreaking``: stick-breaking attention (Tan et al. 2025, "Scaling Stick-Breaking Attention: An
Efficient Implementation and In-depth Study", ICLR, eq. 3-4; reference: shawntan/stickbreaking-attention,
``sb_ref.py``).

No softmax and no position encoding: each key j breaks off a share β_ij = σ(z_ij) of what is left of
query i's stick, the keys nearest the query first, so

    A_ij = β_ij · Π_{j<k<i} (1 − β_ik)

(z_ij the scaled, biased logit). Recency is built into the weights themselves, which is what the
paper credits for length generalisation without positions. ``attend_current`` lets the query's own
token take the first share (the product then runs over j < k ≤ i); the reference's default leaves it
out. ``remainder``: what no key claims, 1 − Σ_j A_ij, goes to the query's own value, as the
reference's tests and its models (``sb_remainder``) do.

On bidirectional attention each side of the query breaks its own stick outward and each side gets
half of it, A = (A_left + A_right) / 2, so the weights still sum to at most one (the paper is causal
only). ``bidirectional`` left ``None`` follows the model, as the task tells it (built without one, the
mask decides: any key after a query left visible means bidirectional).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from poslab.encoders.base import PositionEncoder
from poslab.encoders.registry import register_encoder


@register_encoder("stickbreaking")
class StickBreaking(PositionEncoder):
    paper = "Tan et al. 2025"
    reads = None  # order enters through the weights, not a position field

    def __init__(
        self,
        dim: int,
        num_heads: int,
        attend_current: bool = False,  # the query's own token breaks the stick first (the reference: no)
        remainder: bool = True,  # what no key claims goes to the query's own value
        bidirectional: bool | None = None,  # None: follow the model (causal: one stick, to the left)
    ) -> None:
        super().__init__(dim, num_heads)
        self.attend_current, self.remainder = attend_current, remainder
        self.bidirectional = bidirectional

    def attention_weights(self, logits: torch.Tensor) -> torch.Tensor:
        """``[B, H, L, L]`` logits (masked keys at −inf) -> the stick-breaking weights A (eq. 3-4)."""
        length = logits.shape[-1]
        index = torch.arange(length, device=logits.device)
        offset = index[None, :] - index[:, None]  # j − i
        z = logits.float()
        if not self.attend_current:
            z = z.masked_fill(offset == 0, float("-inf"))
        log_beta, log_rest = F.logsigmoid(z), F.logsigmoid(-z)  # log β, log(1 − β); a masked key: −inf, 0
        left, right = offset <= 0, offset > 0
        # Σ log(1 − β_ik) over the keys between j and the query: k in (j, i] on the left, [i + 1, j) on the right
        on_left = log_rest.masked_fill(~left, 0.0)
        between_left = on_left.flip(-1).cumsum(-1).flip(-1) - on_left
        on_right = log_rest.masked_fill(~right, 0.0)
        between_right = on_right.cumsum(-1) - on_right
        weights = (log_beta + torch.where(left, between_left, between_right)).exp()
        one_sided = weights.masked_fill(right, 0.0)
        if self.bidirectional is None:  # from the mask, without a host sync: a visible later key, two sticks
            two = (torch.isfinite(logits) & right).any()
            weights = torch.where(two, weights / 2, one_sided)
        else:
            weights = weights / 2 if self.bidirectional else one_sided
        if self.remainder:
            unclaimed = 1.0 - weights.sum(-1)
            weights = weights + torch.diag_embed(unclaimed)
        return weights

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, attend_current={self.attend_current}, remainder={self.remainder}, "
            f"bidirectional={self.bidirectional}"
        )
