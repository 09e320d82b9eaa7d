"""``temperature``: Llama 4's attention temperature on its NoPE layers (Meta 2025, Llama 4; Hugging Face
``Llama4TextAttention``, ``attn_temperature_tuning``).

The query at position i is scaled by 1 + a·log(⌊(i + 1)/F⌋ + 1), a = ``attn_scale``
(0.1), F = ``floor_scale``: 1 inside the first F positions, growing with log of
the length past them, so long contexts keep sharp attention where nothing else
tells position apart. Llama 4 applies it only to its layers without RoPE:
``encoder=rope,rope,rope,temperature`` is its interleaved pattern (iRoPE) with
the temperature; alone it is NoPE with the temperature. ``floor_scale`` left
``None`` keeps Llama 4's ratio to the training context: F = 8,192 against the
256K tokens Llama 4 was pre-trained on, 1/32 of the context, so the temperature
acts inside training (F = the context would leave it 1 there, and training
would never see it).
"""

from __future__ import annotations

import torch

from poslab.config.ranges import NonNegative, OptionalCount
from poslab.encoders.base import PositionEncoder
from poslab.encoders.registry import register_encoder

#: Llama 4: ``floor_scale`` 8,192 (Hugging Face ``Llama4TextConfig``) against a 256K-token training context.
LLAMA4_FLOOR = 8192
CONTEXT_PER_FLOOR = 256 * 1024 // LLAMA4_FLOOR  # 32


@register_encoder("temperature")
class AttentionTemperature(PositionEncoder):
    paper = "Meta 2025"
    reads = "steps"

    def __init__(
        self,
        dim: int,
        num_heads: int,
        attn_scale: NonNegative = 0.1,  # a: the query scales by 1 + a·log(⌊(i + 1)/F⌋ + 1)
        floor_scale: OptionalCount = None,  # F: positions per step of the log; None: 1/32 of the training context
        max_len: OptionalCount = None,  # the training context (the data fills it)
    ) -> None:
        super().__init__(dim, num_heads)
        self.attn_scale, self.max_len = attn_scale, max_len
        self.floor_scale = floor_scale or (max(1, max_len // CONTEXT_PER_FLOOR) if max_len else LLAMA4_FLOOR)

    def factor(self, pos) -> torch.Tensor:
        """1 + a·log(⌊(i + 1)/F⌋ + 1) per position, float32, ``[L]`` or ``[B, 1, L]``."""
        steps = self.field(pos).float()
        factor = 1.0 + self.attn_scale * torch.log1p(torch.floor((steps + 1.0) / self.floor_scale))
        return factor.unsqueeze(-2) if factor.dim() == 2 else factor

    def rotate_query(self, x: torch.Tensor, pos) -> torch.Tensor:
        return (x.float() * self.factor(pos).to(x.device)[..., None]).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, attn_scale={self.attn_scale}, floor_scale={self.floor_scale}"
