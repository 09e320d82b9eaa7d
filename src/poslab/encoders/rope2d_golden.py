"""``rope2d_golden``: "golden gate" 2D RoPE (J. Xiong 2025, "On N-dimensional Rotary Positional Embeddings",
jerryxio.ng/posts/nd-rope: its reference ``GoldenGateRoPE2d``).

Axial 2D RoPE turns half its pairs with the column and half with the row, so
a score sees offsets along the two axes only; RoPE-Mixed learns a direction
per pair. Here pair f of head h turns by ω_f·⟨u_hf, p⟩ with fixed unit
directions u_hf = (cos φ_hf, sin φ_hf), φ_hf = (h·F + f)·π/φ (φ the golden
ratio, F = Dh/2 pairs a head): every pair of every head its own direction,
the golden-angle sequence spreading them as evenly as any count allows.
The magnitudes are log-spaced from ω_min to ω_max, both included,
ω_f = ω_min·(ω_max/ω_min)^(f/(F−1)), the same in every head; the first
``zero_freqs`` share of them is 0 (the reference's ``p_zero_freqs``).

p = (x, y) is the patch centre normalised as the reference does: the
training grid's W columns at linspace(−√(W/H), √(W/H), W), its H rows at
linspace(−√(H/W), √(H/W), H) (a square grid spans [−1, 1]). Coordinates
rescaled to the training grid at another image size keep that span (the
reference's scale extrapolation); raw patch indices run past it. Every
angle is linear in p, so a score depends on the 2D offset only; nothing is
learned. Defaults: the reference's CIFAR-10 setting (ω_min 1, ω_max 100:
``base`` is ω_max/ω_min) with its pairs in halves (``chunk``).
"""

from __future__ import annotations

import math
from typing import Annotated

import torch

from poslab.config.ranges import FRACTION, Base, OptionalGrid, Positive
from poslab.encoders.base import PositionEncoder
from poslab.encoders.grid import split_coords
from poslab.encoders.registry import register_encoder
from poslab.encoders.rotary import Layout, apply_rotary
from poslab.errors import ConfigError

GOLDEN_RATIO = (1 + math.sqrt(5)) / 2


def golden_frequencies(heads: int, pairs: int, min_freq: float, base: float, zero_freqs: float = 0.0) -> torch.Tensor:
    """``[2, H, F]`` (x, y) frequency of each head's pairs: ω_f·(cos φ_hf, sin φ_hf), φ_hf = (h·F + f)·π/φ."""
    zeros = round(zero_freqs * pairs)
    ladder = min_freq * base ** torch.linspace(0, 1, pairs - zeros, dtype=torch.float64)
    magnitude = torch.cat((torch.zeros(zeros, dtype=torch.float64), ladder))
    direction = torch.arange(heads * pairs, dtype=torch.float64).view(heads, pairs) * (math.pi / GOLDEN_RATIO)
    return torch.stack((magnitude * direction.cos(), magnitude * direction.sin()))


@register_encoder("rope2d_golden")
class GoldenRoPE2D(PositionEncoder):
    paper = "Xiong 2025"
    reads = "coords"

    # base: ω_max / ω_min; min_freq: ω_min on the normalised coordinates; zero_freqs: the share of pairs at 0
    def __init__(
        self,
        dim: int,
        num_heads: int,
        base: Base = 100.0,
        min_freq: Positive = 1.0,
        zero_freqs: Annotated[float, FRACTION] = 0.0,
        layout: Layout = "half",
        grid_size: OptionalGrid = None,  # None: the data's training (rows, cols), which the coordinates span
    ) -> None:
        super().__init__(dim, num_heads)
        if grid_size is None:
            raise ConfigError("rope2d_golden needs encoder.grid_size (the training patch grid it normalises by)")
        self.base, self.min_freq, self.zero_freqs, self.layout = base, min_freq, zero_freqs, layout
        self.grid_size = (int(grid_size[0]), int(grid_size[1]))
        freqs = golden_frequencies(num_heads, self.head_dim // 2, min_freq, base, zero_freqs)
        self.register_buffer("freqs", freqs, persistent=False)

    def normalised(self, coords: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(x, y) of (row, col) coordinates on the training grid's span (float64)."""
        rows, cols = split_coords(coords)
        height, width = self.grid_size
        x_lim, y_lim = math.sqrt(width / height), math.sqrt(height / width)
        x_step = 2 * x_lim / (width - 1) if width > 1 else 0.0
        y_step = 2 * y_lim / (height - 1) if height > 1 else 0.0
        return cols.double() * x_step - x_lim, rows.double() * y_step - y_lim

    def angles(self, coords: torch.Tensor) -> torch.Tensor:
        """``[..., L, 2] -> [..., H, L, F]`` angles ω_f·⟨u_hf, (x, y)⟩ (float64 products, float32 out)."""
        x, y = self.normalised(coords)
        fx, fy = self.freqs[0].to(x.device), self.freqs[1].to(x.device)
        x, y = x[..., None, :, None], y[..., None, :, None]
        return (x * fx[:, None, :] + y * fy[:, None, :]).float()

    def rotate(self, x, pos):
        return apply_rotary(x, self.angles(self.field(pos).to(x.device)), self.layout)

    def extra_repr(self) -> str:
        return (f"{super().extra_repr()}, base={self.base}, min_freq={self.min_freq}, zero_freqs={self.zero_freqs}, "
                f"layout={self.layout}, grid_size={self.grid_size}")  # fmt: skip
