"""``rope_clipped``: RoPE with its slow frequencies softly clipped (Li et al. 2026, "CoPE: Clipped RoPE as
A Scalable Free Lunch for Long Context LLMs", arXiv 2602.05258; reference: hrlics/CoPE,
``modeling_cope.py``, ``LlamaRotaryEmbedding``). Named apart from ``cope``, the contextual position
encoding of Golovneva et al.

The components whose period 2π/θ_i exceeds the training context never turn a whole period in training, so
past it they meet angles no query has seen (the paper's out-of-distribution outliers). CoPE tapers the
lowest ``clip`` frequencies by a raised cosine, the reference's ``smooth_mask``:

    θ'_{F−c+j} = θ_{F−c+j} · ½ (1 + cos(π j / (c − 1))),   j = 0 … c − 1,

so the first clipped component is untouched and the slowest is frozen (θ = 0); ``taper=hard`` zeroes all
``c`` of them (the reference's ``HardClip`` baseline, which the paper finds rings). ``clip=null`` clips
the components whose period exceeds the training context (``max_len``), the paper's criterion; the
reference fixes 20 of Llama-3-8B's 64 for its 8k context. The taper applies after any context extension,
as the reference re-applies it after a dynamic update.
"""

from __future__ import annotations

import math
from typing import Literal

import torch

from poslab.config.ranges import Base, OptionalCount
from poslab.encoders.registry import register_encoder
from poslab.encoders.rope import RoPE
from poslab.encoders.rope_scaling import RopeScaling
from poslab.encoders.rotary import Layout
from poslab.errors import ConfigError

Taper = Literal["cosine", "hard"]


@register_encoder("rope_clipped")
class ClippedRoPE(RoPE):
    paper = "Li et al. 2026"

    def __init__(
        self,
        dim: int,
        num_heads: int,
        base: Base = 10000.0,
        layout: Layout = "half",  # half (HF rotate_half, as the reference) | interleaved
        clip: OptionalCount = None,  # the lowest frequencies tapered; None: those slower than the training context
        taper: Taper = "cosine",  # cosine (CoPE) | hard (HardClip: set to zero)
        scaling: RopeScaling | None = None,  # a context extension on top (rope's types)
        max_len: OptionalCount = None,  # None: the training context
    ) -> None:
        super().__init__(dim, num_heads, base=base, layout=layout, scaling=scaling, max_len=max_len)
        pairs = self.rot_dim // 2
        if clip is None:
            if max_len is None:
                raise ConfigError("rope_clipped needs max_len (the training context) or clip")
            slower = [i for i in range(pairs) if 2 * math.pi * base ** (2 * i / self.rot_dim) > max_len]
            clip = len(slower)
        if clip > pairs:
            raise ConfigError(f"rope_clipped: clip={clip} is more than the {pairs} frequencies of a head")
        self.clip, self.taper = clip, taper

    def frequencies(self, seq_len: int = 0, device=None) -> tuple[torch.Tensor, float]:
        inv_freq, factor = super().frequencies(seq_len, device)
        if self.clip == 0:
            return inv_freq, factor
        if self.taper == "hard":
            mask = torch.zeros(self.clip, dtype=inv_freq.dtype, device=inv_freq.device)
        else:
            theta = torch.linspace(0.0, math.pi, self.clip, dtype=inv_freq.dtype, device=inv_freq.device)
            mask = 0.5 * (1.0 + torch.cos(theta))
        return torch.cat((inv_freq[: -self.clip], inv_freq[-self.clip :] * mask)), factor

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, clip={self.clip} ({self.taper})"
