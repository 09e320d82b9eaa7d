"""Position-only attention scores: what an encoder alone contributes to q·k.

For each pair of tokens (i, j) the score that *position alone* adds to the
attention logits, with identity projections and no content:

* input encoders: the embedding of i dotted with that of j, ``p_i·p_j/√D``;
* rotary encoders: a constant query / key (all ones) rotated to i and j,
  ``⟨R_i 1, R_j 1⟩/√Dh`` (for RoPE Σ_k 2cos(θ_k(i−j)), the decay curve of the
  RoFormer paper), averaged over heads;
* bias encoders: the bias itself, averaged over heads.

Encoders that use several hooks get the sum. Only the encoder's hooks are
called, so the figure works for any registered encoder.
"""

from __future__ import annotations

import math

import torch

from poslab.encoders.base import PositionEncoder
from poslab.positions import Positions


@torch.no_grad()
def position_similarity(
    encoder: PositionEncoder, pos: Positions | torch.Tensor, length: int, device: torch.device | None = None
) -> torch.Tensor:
    """``[L, L]`` float32 scores for ``length`` tokens at positions ``pos``, returned on ``device``.

    Computed where the encoder lives: ``device``, else that of its parameters
    or buffers (ALiBi and RoPE-2D hold buffers only), else the CPU.
    """
    device = device or encoder_device(encoder)
    pos = pos.to(device)
    scores = torch.zeros(length, length, device=device)
    hooks = encoder.hooks()
    if "encode_input" in hooks:
        emb = encoder.encode_input(torch.zeros(1, length, encoder.dim, device=device), pos)[0].float()
        scores += emb @ emb.T / math.sqrt(encoder.dim)
    if "rotate" in hooks:
        ones = torch.ones(1, encoder.num_heads, length, encoder.head_dim, device=device)
        queries, keys = encoder.rotate_query(ones, pos).float(), encoder.rotate_key(ones, pos).float()
        # over the width attention divides by: the head size, or what an encoder widens queries to (PoPE)
        scores += (queries @ keys.transpose(-1, -2) / math.sqrt(queries.shape[-1])).mean(dim=(0, 1))
    if "attention_bias" in hooks:
        bias = encoder.attention_bias(pos, pos)
        if bias is not None:
            scores += bias.float().reshape(-1, length, length).mean(dim=0)
    if "attention_weights" in hooks:  # the weights of keys whose logits are all equal: position alone
        weights = encoder.attention_weights(torch.zeros(1, encoder.num_heads, length, length, device=device))
        scores += weights.float().mean(dim=(0, 1))
    return scores


def encoder_device(encoder: torch.nn.Module) -> torch.device:
    """Where a module's tensors live: its first parameter or buffer, else the CPU."""
    tensor = next(iter(encoder.parameters()), None)
    if tensor is None:
        tensor = next(iter(encoder.buffers()), None)
    return tensor.device if tensor is not None else torch.device("cpu")
