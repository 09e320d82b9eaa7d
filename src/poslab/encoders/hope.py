"""``hope``: HoPE, Hybrid of Position Embedding (Li et al. 2025, NeurIPS, "HoPE: Hybrid of Position
Embedding for Long Context Vision-Language Models"; reference: hrlics/HoPE, ``modeling_hope.py``).

VideoRoPE's layout (:mod:`poslab.encoders.videorope`: spatial pairs first,
row / column alternating from the highest frequency, the diagonal layout
``(γ·t, γ·t + row, γ·t + col)``) with its hybrid frequency allocation: the
lowest ``temporal_pairs`` frequencies, which VideoRoPE gives to time, are set
to zero (the reference's ``apply_hybrid_multimodal_rotary_pos_emb``: cos 1,
sin 0), so time enters only through the diagonal, and long-range similarity
no longer oscillates with the frame distance (the paper's semantic-preference
argument). Its dynamic temporal scaling trains with the frame indices scaled
by a γ drawn from {0.5, 0.75, 1, 1.25, 1.5}: data-side here, positions being
data (``data.temporal_scales`` of the video modality, one γ per batch where
the reference draws one per video); at inference the reference asks for γ,
here ``temporal_spacing`` (1).
"""

from __future__ import annotations

from poslab.config.ranges import Base, OptionalCount, Positive
from poslab.encoders.mrope import TIME
from poslab.encoders.registry import register_encoder
from poslab.encoders.rotary import Layout
from poslab.encoders.videorope import FrameGrid, VideoRoPE


@register_encoder("hope")
class HoPE(VideoRoPE):
    paper = "Li et al. 2025"

    def __init__(
        self,
        dim: int,
        num_heads: int,
        base: Base = 10000.0,
        temporal_spacing: Positive = 1.0,  # γ at inference (the reference: chosen by the user)
        temporal_pairs: OptionalCount = None,  # the lowest pairs, zeroed; None: the reference's share (16 of 64)
        grid_size: FrameGrid = None,  # None: the data's training (rows, cols), for the frame's centring
        layout: Layout = "half",  # half (HF rotate_half, as the reference) | interleaved
    ) -> None:
        super().__init__(
            dim, num_heads, base=base, temporal_spacing=temporal_spacing, temporal_pairs=temporal_pairs,
            grid_size=grid_size, layout=layout,
        )  # fmt: skip
        self.inv_freq[self.axis_of_pair == TIME] = 0.0  # HFA: temporal pairs carry no rotation
