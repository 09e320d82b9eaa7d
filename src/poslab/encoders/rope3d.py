"""``rope3d``: axial 3D RoPE with fixed frequencies, for video patches.

RoPE-Axial (Heo et al. 2024, eq. 10) extended from (col, row) to three axes:
each head's Dh/2 rotary pairs are split among t, row and col, laid out in that
order (``sections``, pair counts per axis; default an even split with any
remainder going to t, e.g. Dh = 64 -> 32 pairs -> (12, 10, 10)), as Qwen2-VL's
M-RoPE splits (t, h, w). Axis a with n_a pairs rotates pair k by
p_a · 1/base^(2k/d_a), d_a = 2·n_a its channel count (RoFormer's eq. 15 per
axis; rope-vit's base 100). The rotation for (t, row, col) is the product of
three commuting rotations, so scores depend only on the 3D offset (tested).
"""

from __future__ import annotations

import torch

from poslab.config.ranges import Base
from poslab.encoders.base import PositionEncoder
from poslab.encoders.grid import split_coords3d
from poslab.encoders.registry import register_encoder
from poslab.encoders.rotary import LAYOUTS, LastInputCache, Layout, rotate_cached, rotation_angles
from poslab.errors import ConfigError


def default_sections(pairs: int) -> tuple[int, int, int]:
    """Pairs per axis (t, row, col): an even split, the remainder to t."""
    third = pairs // 3
    return (pairs - 2 * third, third, third)


@register_encoder("rope3d")
class AxialRoPE3D(PositionEncoder):
    paper = "Heo et al. 2024"
    reads = "coords3d"

    def __init__(
        self,
        dim: int,
        num_heads: int,
        base: Base = 100.0,  # rope-vit's theta for axial frequencies
        layout: Layout = "interleaved",  # interleaved (adjacent pairs) | half (rotate_half)
        # [t, row, col] pair counts summing to head_dim/2; None: even split, remainder to t
        sections: list[int] | None = None,
    ) -> None:
        super().__init__(dim, num_heads)
        if self.head_dim % 2 or self.head_dim < 6:
            raise ConfigError(f"rope3d needs an even head dim of at least 6 (a pair per axis), got {self.head_dim}")
        pairs = self.head_dim // 2
        sections = default_sections(pairs) if sections is None else tuple(int(s) for s in sections)
        if len(sections) != 3 or min(sections) < 1 or sum(sections) != pairs:
            raise ConfigError(
                f"rope3d: sections must be three positive pair counts (t, row, col) summing to "
                f"head_dim/2 = {pairs}, got {list(sections)}"
            )
        if layout not in LAYOUTS:
            raise ConfigError(f"rope3d: unknown layout '{layout}'; valid: {', '.join(LAYOUTS)}")
        self.base = base
        self.layout = layout
        self.sections = sections
        for axis, n in zip(("t", "row", "col"), sections, strict=True):
            # 1/base^(2k/d_a) with d_a = 2n: 1/base^(k/n), k < n.
            inv_freq = 1.0 / base ** (torch.arange(n, dtype=torch.float64) / n)
            self.register_buffer(f"inv_freq_{axis}", inv_freq, persistent=False)
        self._cos_sin = LastInputCache()

    def angles(self, coords: torch.Tensor) -> torch.Tensor:
        """``[..., L, 3] -> [..., L, Dh/2]``: t angles first, then row, then col."""
        t, rows, cols = split_coords3d(coords)
        return torch.cat(
            (
                rotation_angles(t, self.inv_freq_t),
                rotation_angles(rows, self.inv_freq_row),
                rotation_angles(cols, self.inv_freq_col),
            ),
            dim=-1,
        )

    def rotate(self, x, pos):
        return rotate_cached(self._cos_sin, x, self.field(pos), self.angles, self.layout)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, base={self.base}, layout={self.layout}, sections={list(self.sections)}"
