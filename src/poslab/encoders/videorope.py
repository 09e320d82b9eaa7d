"""``videorope``: VideoRoPE (Wei et al. 2025, "VideoRoPE: What Makes for Good Video
Rotary Position Embedding?", ICML 2025, arXiv 2502.05173; its method section: LTA, DL, ATS).

Conventions follow the official code (github.com/Wiselnn570/VideoRoPE,
``videorope-transformer/modeling_videorope.py``:
``apply_m_modify_multimodal_rotary_pos_emb`` and ``get_t_scale_rope_index``;
the vLLM port ``videorope-vllm/rotary_embedding.py`` agrees):

* LTA, low-frequency temporal allocation: of the Dh/2 pairs of the ladder
  θ_k = base^(−2k/Dh), the last ``temporal_pairs`` (the lowest frequencies)
  follow time; null = the reference's share, Qwen2-VL's t section
  (16 of 64: Dh/2 − 2·⌊3·(Dh/2)/8⌋, as :func:`~poslab.encoders.mrope.qwen2vl_sections`).
* The spatial pairs before them alternate row, col, row, col… starting with
  the row at the highest frequency (the reference's ``row = 1 if j % 2 == 0 else 2``).
* DL, diagonal layout, and ATS, adjustable temporal spacing: a patch at
  (t, row, col) of an H×W frame sits at
  ``(δ·t, δ·t + row − (H−1)//2, δ·t + col − (W−1)//2)``; ``temporal_spacing``
  δ = 2 as the reference trains and evaluates VideoRoPE (``scale_factor = 2.0``).
  The reference's integer centring ``(H−1)//2`` is kept (of the training grid
  ``grid_size``, given by the data); coordinates themselves may be fractional.
  ``grid_size`` null centres nothing. The centring is the same shift for every
  token, so it changes no attention score among video tokens; the spacing δ does.
* Layout ``half``: the reference applies HF ``rotate_half``.

The map is linear in (t, row, col), so scores still depend only on the 3D offset (tested).
"""

from __future__ import annotations

from typing import Annotated, Optional

import torch

from poslab.config.ranges import AT_LEAST_1, Base, OptionalCount, Positive
from poslab.encoders.mrope import COL, ROW, TIME, AxisRoPE3D, qwen2vl_sections
from poslab.encoders.registry import register_encoder
from poslab.encoders.rotary import Layout
from poslab.errors import ConfigError

#: The patch grid a frame's positions are centred on: (rows, cols), or the data's (frames, rows, cols).
FrameGrid = Annotated[Optional[tuple[int, ...]], AT_LEAST_1]


@register_encoder("videorope")
class VideoRoPE(AxisRoPE3D):
    paper = "Wei et al. 2025"

    def __init__(
        self,
        dim: int,
        num_heads: int,
        base: Base = 10000.0,
        temporal_spacing: Positive = 2.0,  # delta: frame t sits at delta*t on the diagonal (reference: scale_factor)
        temporal_pairs: OptionalCount = None,  # lowest-frequency pairs for time; None: the reference's share (16 of 64)
        # None: the data's training (rows, cols), if any (else no centring); frames centred at (H-1)//2, (W-1)//2
        grid_size: FrameGrid = None,
        layout: Layout = "half",  # half (HF rotate_half, as the reference) | interleaved
    ) -> None:
        super().__init__(dim, num_heads, base, layout)
        if temporal_pairs is None:
            temporal_pairs = qwen2vl_sections(self.pairs)[0]
        temporal_pairs = int(temporal_pairs)
        if not 1 <= temporal_pairs <= self.pairs - 2:
            raise ConfigError(
                f"videorope needs 1 <= temporal_pairs <= head_dim/2 - 2 = {self.pairs - 2} (one pair each for time, "
                f"row and col), got temporal_pairs={temporal_pairs} at head dim {self.head_dim}"
            )
        self.temporal_pairs = temporal_pairs
        self.temporal_spacing = float(temporal_spacing)
        self.grid_size = self._rows_cols(grid_size)
        spatial = self.pairs - temporal_pairs
        # LTA: spatial pairs first (high frequencies), row / col alternating; time gets the last, lowest ones
        self.set_axes([ROW if k % 2 == 0 else COL for k in range(spatial)] + [TIME] * temporal_pairs)

    @staticmethod
    def _rows_cols(grid_size) -> tuple[int, int] | None:
        """(rows, cols) of the training frame; a (frames, rows, cols) grid gives its last two."""
        if grid_size is None:
            return None
        grid = tuple(int(g) for g in grid_size)
        if len(grid) not in (2, 3) or min(grid) < 1:
            raise ConfigError(f"videorope.grid_size must be (rows, cols) or (frames, rows, cols), got {grid_size}")
        return grid[-2:]

    def positions3d(self, coords: torch.Tensor) -> torch.Tensor:
        """DL + ATS (reference ``get_t_scale_rope_index``): the frame's centre on the diagonal δ·t."""
        t, row, col = coords.unbind(-1)
        rows, cols = self.grid_size or (1, 1)  # no grid: no centring
        diagonal = self.temporal_spacing * t
        return torch.stack((diagonal, diagonal + row - (rows - 1) // 2, diagonal + col - (cols - 1) // 2), dim=-1)

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, temporal_spacing={self.temporal_spacing}, "
            f"temporal_pairs={self.temporal_pairs}, grid_size={self.grid_size}"
        )
