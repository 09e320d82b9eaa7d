"""``path``: PaTH attention, position as accumulated Householder transforms (Yang et al. 2025, "PaTH
Attention: Position Encoding via Accumulating Householder Transformations", NeurIPS, eq. 2-3; reference:
fla-org/flash-linear-attention, ``fla/layers/path_attn.py``).

Each token t of a layer's input gives a Householder-like transform H_t = I − β_t w_t w_tᵀ per head, and
the logit of query i for key j ≤ i is

    z_ij = q_iᵀ H_i H_{i−1} ⋯ H_{j+1} k_j / √d

in place of RoPE's fixed rotation R^(i−j): the transform between two tokens depends on what lies between
them, which lets attention track state (the paper's flip-flop and permutation results). As the
reference: w_t = normalise(conv(W_b W_a x_t)) per head, W_a ``dim → rank`` and W_b ``rank → dim``
without biases, conv a causal depthwise convolution over 3 tokens followed by SiLU (``conv``);
β_t = 2 σ(u_h·x_t + c_h) in (0, 2), so H_t can reflect (eigenvalue 1 − β_t < 0). One set per layer (the
model's depth fills ``depth``), PyTorch's default initialisation.

All pairs' products come from one UT transform per head (:func:`householder_logits`; the reference
chunks the same algebra in a GPU kernel). On
bidirectional attention a key after the query is read through the transforms of the tokens from the
query to the key, in the other order (the causal formula on the sequence reversed). Alone it is PaTH
without RoPE (the paper's); ``rope+path`` rotates first, ``path+fox`` adds FoX's gates (PaTH-FoX).
"""

from __future__ import annotations

import math
from typing import Annotated

import torch
import torch.nn.functional as F
from torch import nn

from poslab.config.ranges import AT_LEAST_1, OptionalCount
from poslab.encoders.base import PositionEncoder
from poslab.encoders.registry import register_encoder


class HouseholderGates(nn.Module):
    """One layer's w_t (unit per head) and β_t from its input tokens."""

    def __init__(self, dim: int, num_heads: int, rank: int, conv: bool) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.down = nn.Linear(dim, rank, bias=False)
        self.up = nn.Linear(rank, dim, bias=False)
        self.conv = nn.Conv1d(dim, dim, kernel_size=3, groups=dim, bias=False) if conv else None
        self.beta = nn.Linear(dim, num_heads)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``x [B, L, D]`` -> w ``[B, H, L, Dh]`` (unit vectors), β ``[B, H, L]`` in (0, 2); float32."""
        batch, length, dim = x.shape
        w = self.up(self.down(x)).float()
        if self.conv is not None:  # causal: token t mixes t − 2 … t
            w = F.silu(self.conv(F.pad(w.transpose(1, 2), (2, 0)))).transpose(1, 2)
        w = F.normalize(w.view(batch, length, self.num_heads, -1), dim=-1).transpose(1, 2)
        beta = 2.0 * torch.sigmoid(self.beta(x).float()).transpose(1, 2)
        return w, beta


def householder_logits(q: torch.Tensor, k: torch.Tensor, w: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """q_iᵀ H_i ⋯ H_{j+1} k_j for j ≤ i (0 above the diagonal): ``[B, H, L, L]``, float32.

    All pairs at once through the UT transform (Joffrain et al. 2006; the PaTH paper's §3.2): the product
    of the H_t over an interval (j, i] is I − Σ w_s T_st w_tᵀ over s, t in it, T = (I + diag(β)·strictly
    lower(W Wᵀ))⁻¹ diag(β) lower triangular, and a diagonal block of a triangular matrix's inverse is the
    inverse of its block, so one T serves every interval:

        z_ij = q_i·k_j − Σ_{j<t≤s≤i} (q_i·w_s) T_st (w_t·k_j) = [QKᵀ − (QWᵀ ⊙ [s ≤ i]) T (WKᵀ ⊙ [t > j])]_ij.

    O(L²·d + L³) per head in a few batched matmuls and one triangular solve. Token by token (O(L²·d), but L
    sequential steps of small ops, each kept for the backward) a training step of 6 layers at 64 tokens
    measured 3× slower on the same loaded cores, and 512 tokens did not fit in 24 GB.
    """
    q, k, w, beta = q.float(), k.float(), w.float(), beta.float()
    length = q.shape[-2]
    eye = torch.eye(length, device=q.device, dtype=q.dtype)
    unit_lower = eye + beta[..., :, None] * (w @ w.transpose(-1, -2)).tril(-1)
    t = torch.linalg.solve_triangular(unit_lower, torch.diag_embed(beta), upper=False, unitriangular=True)
    q_w = (q @ w.transpose(-1, -2)).tril()  # q_i·w_s for s ≤ i
    w_k = (w @ k.transpose(-1, -2)).tril(-1)  # w_t·k_j for t > j
    return (q @ k.transpose(-1, -2) - q_w @ t @ w_k).tril()


@register_encoder("path")
class PaTH(PositionEncoder):
    paper = "Yang et al. 2025"
    reads = None  # the transforms come from the tokens

    def __init__(
        self,
        dim: int,
        num_heads: int,
        rank: Annotated[int, AT_LEAST_1] = 32,  # the low-rank projection of w (the reference's 32)
        conv: bool = True,  # the causal short convolution over w (the reference's)
        depth: OptionalCount = None,  # one set per layer (the model's depth); None: one shared by every layer
        bidirectional: bool | None = None,  # None: follow the model (causal: keys up to the query)
    ) -> None:
        super().__init__(dim, num_heads)
        self.rank, self.conv, self.depth = rank, conv, depth
        self.bidirectional = bool(bidirectional)
        self.gates = nn.ModuleList(HouseholderGates(dim, num_heads, rank, conv) for _ in range(depth or 1))

    def transforms(self, x: torch.Tensor, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer ``layer``'s w ``[B, H, L, Dh]`` and β ``[B, H, L]``."""
        return self.gates[layer % len(self.gates)](x)

    def attention_logits(self, q, k, x, layer):
        """z_ij (eq. 2-3), before any bias or mask: ``[B, H, L, L]``."""
        w, beta = self.transforms(x, layer)
        logits = householder_logits(q, k, w, beta)
        if self.bidirectional:  # the keys after the query: the same product on the sequence reversed
            reversed_ = householder_logits(*(t.flip(-2) for t in (q, k, w)), beta.flip(-1))
            logits = logits + reversed_.flip(-1).flip(-2).triu(1)
        return logits / math.sqrt(q.shape[-1])

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, rank={self.rank}, conv={self.conv}, depth={self.depth}, "
            f"bidirectional={self.bidirectional}"
        )
