"""``mrope``: Qwen2-VL's multimodal RoPE (M-RoPE) for video patches.

Wang et al. 2024, "Qwen2-VL", §2.1 (M-RoPE): one RoPE frequency ladder
θ_k = base^(−2k/Dh), k < Dh/2, cut into three consecutive sections
``[t, h, w]``: the pairs of the first section rotate with the frame index, the
next with the patch row, the last with the patch column. Reproduced from
Hugging Face transformers ``apply_multimodal_rotary_pos_emb``
(``models/qwen2_vl/modeling_qwen2_vl.py``: ``mrope_section * 2`` split of the
``rotate_half`` cos / sin), so the default layout is ``half``.

* ``sections``: pair counts ``[t, h, w]`` summing to Dh/2; null = Qwen2-VL's
  proportions [1/4, 3/8, 3/8] as h = w = ⌊3·(Dh/2)/8⌋ and t the rest
  ([16, 24, 24] at Dh 128, exactly Qwen2-VL's; [2, 3, 3] at Dh 16).
* ``interleaved``: Qwen3-VL's interleaved M-RoPE (Bai et al. 2025, Qwen3-VL;
  HF ``apply_interleaved_mrope``): instead of consecutive blocks, pair k
  follows the row when k ≡ 1 (mod 3) and k < 3h, the column when k ≡ 2
  (mod 3) and k < 3w, the frame index otherwise, so every axis gets
  frequencies from the whole ladder (chunked M-RoPE gives the column only
  the lowest). Its sections default to Qwen3-VL's [24, 20, 20] of 64 pairs:
  h = w = ⌊5·pairs/16⌋, t the rest.
* A text-like token (t = h = w = p) is rotated exactly as 1D RoPE at p
  (the paper's stated property; tested).

The module also holds what :mod:`poslab.encoders.videorope` shares: pairs that
each follow one coordinate of a (possibly remapped) 3D position.
"""

from __future__ import annotations

import math

import torch

from poslab.config.ranges import Base
from poslab.encoders.base import PositionEncoder
from poslab.encoders.grid import split_coords3d
from poslab.encoders.registry import register_encoder
from poslab.encoders.rotary import LAYOUTS, LastInputCache, Layout, rotate_cached
from poslab.errors import ConfigError

#: Axis numbers of a ``coords3d`` row: (t, row, col).
TIME, ROW, COL = 0, 1, 2


def qwen2vl_sections(pairs: int) -> list[int]:
    """Qwen2-VL's ``[t, h, w]`` = [1/4, 3/8, 3/8] of ``pairs``: h = w = ⌊3·pairs/8⌋, t takes the remainder.

    Equal spatial sections keep rows and columns symmetric; at 64 pairs this is
    Qwen2-VL's ``mrope_section`` [16, 24, 24].
    """
    spatial = 3 * pairs // 8
    return [pairs - 2 * spatial, spatial, spatial]


def qwen3vl_sections(pairs: int) -> list[int]:
    """Qwen3-VL's interleaved ``[t, h, w]``: h = w = ⌊5·pairs/16⌋, t the rest ([24, 20, 20] at 64 pairs)."""
    spatial = 5 * pairs // 16
    return [pairs - 2 * spatial, spatial, spatial]


def interleaved_axes(sections: list[int], pairs: int) -> list[int]:
    """HF ``apply_interleaved_mrope``'s assignment: row at k ≡ 1, column at k ≡ 2 (mod 3) below 3h and 3w."""
    _, h, w = sections
    return [ROW if k % 3 == 1 and k < 3 * h else COL if k % 3 == 2 and k < 3 * w else TIME for k in range(pairs)]


class AxisRoPE3D(PositionEncoder):
    """RoPE whose pair k turns by ``position[axis_of_pair[k]] · θ_k``.

    Subclasses fill the ``axis_of_pair`` buffer (which of t / row / col each
    pair follows) and may remap positions first (:meth:`positions3d`). Since
    every angle is linear in the 3D position, scores depend only on the 3D
    offset between two tokens.
    """

    reads = "coords3d"

    def __init__(self, dim: int, num_heads: int, base: float, layout: Layout) -> None:
        super().__init__(dim, num_heads)
        if self.head_dim % 2:
            raise ConfigError(f"{self.name} needs an even head dim, got {self.head_dim}")
        if layout not in LAYOUTS:
            raise ConfigError(f"{self.name}: unknown layout '{layout}'; valid: {', '.join(LAYOUTS)}")
        self.base = base
        self.layout = layout
        self.pairs = self.head_dim // 2
        # one shared ladder θ_k = base^(−2k/Dh), as 1D RoPE (RoFormer eq. 15)
        inv_freq = 1.0 / base ** (torch.arange(0, self.head_dim, 2, dtype=torch.float64) / self.head_dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self._cos_sin = LastInputCache()

    def set_axes(self, axis_of_pair: list[int]) -> None:
        self.register_buffer("axis_of_pair", torch.tensor(axis_of_pair, dtype=torch.long), persistent=False)

    def positions3d(self, coords: torch.Tensor) -> torch.Tensor:
        """The (t, row, col) each axis of pairs rotates with; here the data's own."""
        return coords

    def angles(self, coords: torch.Tensor) -> torch.Tensor:
        """``[..., L, 3] -> [..., L, Dh/2]`` angles, float64 reduced mod 2π, returned float32 (as rotary.py)."""
        pos = self.positions3d(torch.stack(split_coords3d(coords), dim=-1).to(torch.float64))
        per_pair = pos.index_select(-1, self.axis_of_pair.to(pos.device))
        return torch.remainder(per_pair * self.inv_freq.to(pos.device), 2 * math.pi).float()

    def rotate(self, x, pos):
        return rotate_cached(self._cos_sin, x, self.field(pos), self.angles, self.layout)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, base={self.base}, layout={self.layout}"


@register_encoder("mrope")
class MRoPE(AxisRoPE3D):
    paper = "Wang et al. 2024"

    def __init__(
        self,
        dim: int,
        num_heads: int,
        base: Base = 10000.0,
        # [t, h, w] pairs summing to head_dim/2; None: h = w = floor(3/8 of them), t the rest ([16, 24, 24] at 128)
        sections: list[int] | None = None,
        layout: Layout = "half",  # half (HF rotate_half, as the reference) | interleaved
        interleaved: bool = False,  # Qwen3-VL: t, h, w pairs interleaved over the ladder instead of blocks
    ) -> None:
        super().__init__(dim, num_heads, base, layout)
        self.interleaved = interleaved
        if sections is None:
            sections = qwen3vl_sections(self.pairs) if interleaved else qwen2vl_sections(self.pairs)
            if min(sections) < 1:
                raise ConfigError(
                    f"mrope needs a head dim of at least 6 (one pair each for t, h, w), got {self.head_dim}"
                )
        sections = [int(s) for s in sections]
        if len(sections) != 3 or min(sections) < 0 or sum(sections) != self.pairs:
            raise ConfigError(
                f"mrope.sections={sections} must be three pair counts [t, h, w] summing to head_dim/2 = {self.pairs}"
            )
        self.sections = sections
        if not interleaved:
            # Qwen2-VL §2.1 / HF mrope_section: consecutive frequency blocks for t, then h (row), then w (col)
            self.set_axes([TIME] * sections[0] + [ROW] * sections[1] + [COL] * sections[2])
            return
        axes = interleaved_axes(sections, self.pairs)
        if [axes.count(a) for a in (TIME, ROW, COL)] != sections:
            raise ConfigError(
                f"mrope.sections={sections} do not fit interleaved over {self.pairs} pairs: the row takes pairs "
                f"1, 4, … below 3h and the column 2, 5, … below 3w "
                f"(need 3h − 2 < {self.pairs} and 3w − 1 < {self.pairs})"
            )
        self.set_axes(axes)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, sections={self.sections}, interleaved={self.interleaved}"
