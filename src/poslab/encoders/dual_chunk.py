"""Dual Chunk Attention: RoPE run past its training length without training (An et al. 2024, "Training-Free
Long-Context Scaling of Large Language Models", ICML, §3; Qwen2.5-1M; reference: HKUNLP/ChunkLlama,
``chunkllama_attn_replace.py``). ``rope``'s context extension ``dca`` (``eval.rope_scaling``).

The sequence is cut into chunks of ``c = chunk_size − local_window`` tokens, ``chunk_size`` = ¾ and
``local_window`` = 1/16 of the training context (the reference's ``replace_with_chunkllama``). A key at j
is at position j mod c; the query at i reads it at one of three positions, after the chunks of i and j:

* the same chunk (intra-chunk attention): i mod c, so the offset is i − j, as plain RoPE;
* the chunk before (successive-chunk attention): min(i mod c + c, chunk_size), so neighbours stay close;
* any earlier chunk (inter-chunk attention): chunk_size.

Every offset is then at most ``chunk_size``, which training saw. The reference computes the three parts
with flash attention and merges them by their log-sum-exp: one softmax over all the keys, which is what the
logits written out here give (``attention_logits``). Positions are the tokens' indices in the sequence, as
the reference's ``position_ids``. It has no factor: the length study's factor is not read.
"""

from __future__ import annotations

import math

import torch

from poslab.encoders.base import PositionEncoder
from poslab.encoders.rotary import apply_cos_sin, rotation_angles


class DualChunk(PositionEncoder):
    """A RoPE encoder's frequencies and layout read through Dual Chunk Attention's three position maps."""

    reads = "steps"

    def __init__(self, inv_freq: torch.Tensor, layout: str, dim: int, num_heads: int, context: int) -> None:
        super().__init__(dim, num_heads)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.layout = layout
        self.chunk_size = context * 3 // 4
        self.local_window = context // 16
        self.chunk = self.chunk_size - self.local_window

    def relations(self, length_q: int, length_k: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
        """(``[Lq, 3]`` the position query i takes in its own chunk, the chunk before and earlier ones,
        ``[Lq, Lk]`` which of the three key j's chunk is to it: 0, 1 or 2); queries are the last ``Lq`` tokens."""
        i = torch.arange(length_k - length_q, length_k, device=device)
        j = torch.arange(length_k, device=device)
        within = i % self.chunk
        positions = torch.stack(
            (within, (within + self.chunk).clamp(max=self.chunk_size), torch.full_like(within, self.chunk_size)), dim=-1
        )
        behind = (i // self.chunk)[:, None] - (j // self.chunk)[None, :]
        return positions, behind.clamp(min=0, max=2)

    def _turned(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        angles = rotation_angles(positions, self.inv_freq.to(positions.device))
        return apply_cos_sin(x, angles.cos(), angles.sin(), self.layout)

    def attention_logits(self, q, k, x, layer):
        """One logit per (query, key), its query turned by the relation of their chunks (reference: the three
        ``do_flash_attn`` calls), before any bias or mask."""
        length_q, length_k = q.shape[-2], k.shape[-2]
        keys = self._turned(k, torch.arange(length_k, device=k.device) % self.chunk).float().transpose(-1, -2)
        positions, behind = self.relations(length_q, length_k, q.device)
        parts = [self._turned(q, positions[:, r]).float() @ keys for r in range(3)]  # intra, successive, inter
        logits = torch.where(behind == 0, parts[0], torch.where(behind == 1, parts[1], parts[2]))
        return logits / math.sqrt(q.shape[-1])

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, chunk_size={self.chunk_size}, local_window={self.local_window}"
