"""``learned2d``: a learned ``[gh, gw, D]`` table added to the patch tokens.

ViT (Dosovitskiy et al. 2021) learns one embedding per patch; keeping the
table as a 2D grid lets it follow a change of image size the way ViT fine-tunes
at higher resolution: the table is resampled bicubically
(timm ``resample_abs_pos_embed``). Here that happens through the positions:
coordinates rescaled to the training grid are fractional and the table is
sampled bicubically there, which equals resampling the whole table (tested).
Raw patch indices past the table have no embedding and are a clear error.
"""

from __future__ import annotations

import torch
from torch import nn

from poslab.encoders.base import PositionEncoder
from poslab.encoders.grid import sample_grid_table, split_coords
from poslab.encoders.registry import register_encoder
from poslab.errors import PoslabError


@register_encoder("learned2d")
class Learned2D(PositionEncoder):
    modalities = ("vision",)
    reads = "coords"

    def __init__(
        self, dim: int, num_heads: int, grid_size: tuple[int, int] | None = None, init_std: float = 0.02
    ) -> None:
        super().__init__(dim, num_heads)
        if grid_size is None:
            raise PoslabError("learned2d needs encoder.grid_size (the training patch grid)")
        self.grid_size = (int(grid_size[0]), int(grid_size[1]))
        self.table = nn.Parameter(torch.empty(*self.grid_size, dim))
        nn.init.trunc_normal_(self.table, std=init_std)

    def lookup(self, coords: torch.Tensor) -> torch.Tensor:
        """Embedding of each (row, col): exact rows at integer cells, bicubic between."""
        rows, cols = split_coords(coords)
        gh, gw = self.grid_size
        if rows.min() < -0.5 or cols.min() < -0.5 or rows.max() > gh - 0.5 or cols.max() > gw - 0.5:
            raise PoslabError(
                f"learned2d: patch coordinates reach row {rows.max().item():g}, col "
                f"{cols.max().item():g} but the table is {gh}x{gw}; evaluate with "
                "data.coords=rescaled to resample it"
            )
        ri, ci = rows.round(), cols.round()
        if torch.equal(ri, rows) and torch.equal(ci, cols):
            return self.table[ri.long(), ci.long()]
        return sample_grid_table(self.table, coords)

    def encode_input(self, x, pos):
        return x + self.lookup(self.field(pos).to(x.device)).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, grid_size={self.grid_size}"
