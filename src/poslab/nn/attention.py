"""Multi-head self-attention through ``scaled_dot_product_attention``.

Position enters at two points here: ``rotate`` on queries and keys (RoPE
family) and an additive logits bias (ALiBi, T5, …) passed in from the
backbone, which computes it once per forward pass for all layers. The
``q·k/√Dh`` scale is SDPA's; biases are added after it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from poslab.encoders.base import PositionEncoder
from poslab.positions import Positions


class SelfAttention(nn.Module):
    def __init__(self, dim: int, num_heads: int, dropout: float = 0.0, qkv_bias: bool = True) -> None:
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"dim {dim} is not divisible by num_heads {num_heads}")
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        self.dropout = dropout

    def forward(
        self,
        x: torch.Tensor,
        encoder: PositionEncoder,
        pos: Positions | torch.Tensor,
        mask: torch.Tensor | None = None,
        num_prefix_tokens: int = 0,
        causal: bool = False,
    ) -> torch.Tensor:
        """``x [B, L, D]``; ``mask`` a float bias broadcastable to ``[B, H, L, L]``."""
        batch, length, dim = x.shape
        q, k, v = self.qkv(x).view(batch, length, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q = _rotate_tokens(encoder, q, pos, num_prefix_tokens)
        k = _rotate_tokens(encoder, k, pos, num_prefix_tokens)
        out = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            dropout_p=self.dropout if self.training else 0.0,
            is_causal=causal and mask is None,
        )
        return self.proj(out.transpose(1, 2).reshape(batch, length, dim))


def _rotate_tokens(
    encoder: PositionEncoder, x: torch.Tensor, pos: Positions | torch.Tensor, num_prefix_tokens: int
) -> torch.Tensor:
    """Rotate the positioned tokens; prefix tokens (class token) stay unrotated."""
    if not num_prefix_tokens:
        return encoder.rotate(x, pos)
    prefix, rest = x[..., :num_prefix_tokens, :], x[..., num_prefix_tokens:, :]
    return torch.cat((prefix, encoder.rotate(rest, pos)), dim=-2)
