"""``rope2d_dinov3``: DINOv3's axial RoPE, on patch coordinates normalised to [-1, 1], with its training-time
shift, jitter and rescale of the coordinates.

Siméoni et al. 2025, "DINOv3" (facebookresearch/dinov3, ``dinov3/layers/rope_position_encoding.py``,
``RopePositionEmbedding``, applied by ``rope_apply`` in ``dinov3/layers/attention.py``):

* the patch in cell (i, j) of an H × W grid sits at (2(i + ½)/H − 1, 2(j + ½)/W − 1) (``normalize=separate``;
  ``max`` / ``min`` divide both axes by max(H, W) / min(H, W));
* a head of D channels has D/4 periods, base^(4k/D) (or ``min_period`` … ``max_period``, log-spaced); a
  coordinate c turns by 2πc / period; the first D/4 pairs take the row, the next D/4 the column, channel k
  paired with k + D/2 (``rotate_half``);
* in training, once per step (the reference: once per forward pass): c + U(−shift, shift) per axis, then
  × exp(U(−ln jitter, ln jitter)) per axis, then × exp(U(−ln rescale, ln rescale)) for both axes. DINOv3
  trains with base 100 and rescale 2 (``configs/train/dinov3_vit7b16_pretrain.yaml``).

Positions are data: the coordinates arrive in cells of the training grid (``grid_size``), and are normalised by
it. At another resolution the data's ``rescaled`` coordinates land where the reference puts that grid's patches
(normalised by the new grid: the same [-1, 1]); ``raw`` ones run past ±1, as a grid larger than trained on.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal, Optional

import torch

from poslab.config.ranges import AT_LEAST_0, POSITIVE, OptionalGrid, Range
from poslab.encoders.base import PositionEncoder
from poslab.encoders.grid import split_coords
from poslab.encoders.registry import register_encoder
from poslab.encoders.rotary import LastInputCache, apply_cos_sin, per_token_angles, rotation_angles
from poslab.errors import ConfigError

Factor = Annotated[Optional[float], Range(1)]  # a log-uniform factor in [1/f, f]


@register_encoder("rope2d_dinov3")
class DINOv3RoPE(PositionEncoder):
    paper = "Siméoni et al. 2025"
    reads = "coords"

    # base: periods base^(4k/D) (DINOv3: 100); or min_period and max_period (base null)
    # normalize: separate (each axis by its own size) | max | min (both by the larger / smaller)
    # shift, jitter, rescale: the training-time augmentation of the coordinates (null: off)
    # grid_size: null: the training patch grid, from the data
    def __init__(
        self,
        dim: int,
        num_heads: int,
        base: Annotated[Optional[float], POSITIVE] = 100.0,
        min_period: Annotated[Optional[float], POSITIVE] = None,
        max_period: Annotated[Optional[float], POSITIVE] = None,
        normalize: Literal["separate", "max", "min"] = "separate",
        shift: Annotated[Optional[float], AT_LEAST_0] = None,
        jitter: Factor = None,
        rescale: Factor = None,
        grid_size: OptionalGrid = None,
    ) -> None:
        super().__init__(dim, num_heads)
        if self.head_dim % 4:
            raise ConfigError(f"rope2d_dinov3 needs a head dim divisible by 4, got {self.head_dim}")
        if (base is None) == (min_period is None or max_period is None) or (min_period is None) != (max_period is None):
            raise ConfigError("rope2d_dinov3 takes either base or min_period and max_period (set base=null for them)")
        if grid_size is None:
            raise ConfigError("rope2d_dinov3 needs encoder.grid_size (the training patch grid) to normalise by")
        self.base, self.min_period, self.max_period, self.normalize = base, min_period, max_period, normalize
        self.shift, self.jitter, self.rescale = shift, jitter, rescale
        self.grid_size = (int(grid_size[0]), int(grid_size[1]))
        quarter = torch.arange(self.head_dim // 4, dtype=torch.float64)
        if base is not None:
            periods = base ** (4 * quarter / self.head_dim)
        else:
            periods = min_period * (max_period / min_period) ** torch.linspace(0, 1, len(quarter), dtype=torch.float64)
        self.register_buffer("periods", periods, persistent=False)
        self.steps = 0  # training steps told so far: a new draw of the augmentation for each
        self._cos_sin = LastInputCache()

    def train_progress(self, fraction: float) -> None:
        self.steps += 1

    def normalised(self, coords: torch.Tensor) -> torch.Tensor:
        """``[..., L, 2]`` cells of the training grid -> [-1, 1] (the reference's layout), augmented in training."""
        rows, cols = self.grid_size
        sizes = {"separate": (rows, cols), "max": (max(rows, cols),) * 2, "min": (min(rows, cols),) * 2}
        span = torch.tensor(sizes[self.normalize], dtype=torch.float64, device=coords.device)
        c = 2 * (coords.to(torch.float64) + 0.5) / span - 1
        if self.training and self.shift is not None:
            c = c + torch.empty(2).uniform_(-self.shift, self.shift).to(c)
        if self.training and self.jitter is not None:
            c = c * torch.empty(2).uniform_(-math.log(self.jitter), math.log(self.jitter)).exp().to(c)
        if self.training and self.rescale is not None:
            c = c * torch.empty(1).uniform_(-math.log(self.rescale), math.log(self.rescale)).exp().to(c)
        return c

    def angles(self, coords: torch.Tensor) -> torch.Tensor:
        """``[..., L, 2] -> [..., L, D/2]``: row angles first, then column angles."""
        rows, cols = split_coords(self.normalised(coords))
        inv_freq = (2 * math.pi / self.periods).to(coords.device)
        return torch.cat((rotation_angles(rows, inv_freq), rotation_angles(cols, inv_freq)), dim=-1)

    def rotate(self, x, pos):
        def cos_sin(source: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            angles = per_token_angles(self.angles(source.to(x.device)))
            return angles.cos(), angles.sin()

        key = (self.training, self.steps)  # one draw a step, shared by every layer
        cos, sin = self._cos_sin.get(self.field(pos), cos_sin, key=key)
        return apply_cos_sin(x, cos, sin, "half")

    def extra_repr(self) -> str:
        periods = f"base={self.base}" if self.base is not None else f"periods={self.min_period}..{self.max_period}"
        return f"{super().extra_repr()}, {periods}, normalize={self.normalize}, grid_size={self.grid_size}"
