"""``learned2d``: a learned ``[gh, gw, D]`` table added to the patch tokens.

ViT (Dosovitskiy et al. 2021) learns one embedding per patch; keeping the
table as a 2D grid lets it follow a change of image size the way ViT fine-tunes
at higher resolution: the table is resampled bicubically as DeiT and rope-vit
do, ``F.interpolate(mode="bicubic", align_corners=False)`` without antialiasing
(Keys cubic convolution, a = −0.75, half-pixel centres, edge cells repeated;
tested against that kernel written out). timm's ``resample_abs_pos_embed``
antialiases by default, a different kernel: about 7% relative difference on a
random 4x4 -> 8x8 table. Here the resampling happens through the positions:
coordinates rescaled to the training grid are fractional and the table is
sampled bicubically there, which equals resampling the whole table (tested).
Raw patch indices past the table have no embedding and are a clear error.
"""

from __future__ import annotations

import torch
from torch import nn

from poslab.config.ranges import NonNegative, OptionalGrid
from poslab.encoders.base import PositionEncoder
from poslab.encoders.grid import sample_grid_table, split_coords
from poslab.encoders.learned import init_table
from poslab.encoders.registry import register_encoder
from poslab.errors import PoslabError
from poslab.positions import Positions, readable


@register_encoder("learned2d")
class Learned2D(PositionEncoder):
    paper = "Dosovitskiy et al. 2021"
    reads = "coords"

    def __init__(
        self,
        dim: int,
        num_heads: int,
        grid_size: OptionalGrid = None,  # None: the training patch grid
        init_std: NonNegative = 0.02,
    ) -> None:
        super().__init__(dim, num_heads)
        if grid_size is None:
            raise PoslabError("learned2d needs encoder.grid_size (the training patch grid)")
        self.grid_size = (int(grid_size[0]), int(grid_size[1]))
        self.table = nn.Parameter(torch.empty(*self.grid_size, dim))
        init_table(self.table, init_std)

    def lookup(self, coords: torch.Tensor, grid: tuple[int, int] | None = None) -> torch.Tensor:
        """Embedding of each (row, col): exact rows at integer cells, bicubic between.

        ``grid``: the data's statement that ``coords`` are the integer cells of
        that grid (checked against the table without reading the tensor);
        otherwise the coordinates are read where that is free (a CPU call) and
        the bicubic lookup serves every other case.
        """
        gh, gw = self.grid_size
        if grid is None and readable(coords):
            rows, cols = split_coords(coords)
            if rows.min() < -0.5 or cols.min() < -0.5 or rows.max() > gh - 0.5 or cols.max() > gw - 0.5:
                raise self._out_of_range(f"row {rows.max().item():g}, col {cols.max().item():g}")
            if torch.equal(coords, coords.round()):
                grid = self.grid_size
        if grid is None:
            return sample_grid_table(self.table, coords)
        if grid[0] > gh or grid[1] > gw:
            raise self._out_of_range(f"row {grid[0] - 1}, col {grid[1] - 1}")
        index = coords.long()
        return self.table[index[..., 0], index[..., 1]]

    def _out_of_range(self, where: str) -> PoslabError:
        gh, gw = self.grid_size
        return PoslabError(
            f"learned2d: patch coordinates reach {where} but the table is {gh}x{gw}; "
            "evaluate with data.coords=rescaled to resample it"
        )

    def encode_input(self, x, pos):
        grid = pos.coords_grid if isinstance(pos, Positions) else None
        return x + self.lookup(self.field(pos).to(x.device), grid).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, grid_size={self.grid_size}"
