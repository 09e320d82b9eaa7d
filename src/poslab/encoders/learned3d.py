"""``learned3d``: separable learned embedding, a time table plus a 2D table, added to the tokens.

MAE-ST (Feichtenhofer et al. 2022, ``sep_pos_embed``): a learned ``[frames, D]``
time table and a learned ``[gh, gw, D]`` spatial table, summed, so a video needs
frames + gh·gw embeddings instead of their product (the spatial table kept as a
grid, as in ``learned2d``). At other sizes the tables follow through the
positions: coordinates rescaled to the training clip are fractional; the 2D
table is sampled bicubically (``learned2d``'s kernel) and the time table
linearly with half-pixel centres, clamped at the ends — what resampling the
whole table with ``F.interpolate(mode="linear", align_corners=False)`` gives
(tested). Integer cells index the tables exactly; raw indices past a table
have no embedding and are a clear error.
"""

from __future__ import annotations

import torch
from torch import nn

from poslab.config.ranges import NonNegative, OptionalCount, OptionalGrid
from poslab.encoders.base import PositionEncoder
from poslab.encoders.grid import sample_grid_table, split_coords3d
from poslab.encoders.learned import init_table
from poslab.encoders.registry import register_encoder
from poslab.errors import PoslabError
from poslab.positions import Positions, readable


def sample_time_table(table: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """Linear lookup of a ``[F, D]`` table at float frames ``t`` (``[..., L]``) -> ``[..., L, D]``.

    Cell centres at integers, positions clamped to ``[0, F − 1]`` (edge rows
    repeated), as ``F.interpolate(mode="linear", align_corners=False)`` does;
    integer frames give table rows exactly.
    """
    frames = table.shape[0]
    if frames == 1:
        return table[0].expand(*t.shape, table.shape[1])
    t = t.to(table.dtype).clamp(0, frames - 1)
    left = t.floor().long().clamp(max=frames - 2)
    w = (t - left)[..., None]
    return table[left] * (1 - w) + table[left + 1] * w


@register_encoder("learned3d")
class Learned3D(PositionEncoder):
    paper = "Feichtenhofer et al. 2022"
    reads = "coords3d"

    def __init__(
        self,
        dim: int,
        num_heads: int,
        grid_size: OptionalGrid = None,  # None: the training patch grid
        frames: OptionalCount = None,  # None: the training clip's frame count (temporal patches)
        init_std: NonNegative = 0.02,
    ) -> None:
        super().__init__(dim, num_heads)
        if grid_size is None:
            raise PoslabError("learned3d needs encoder.grid_size (the training patch grid)")
        if frames is None:
            raise PoslabError("learned3d needs encoder.frames (the training clip's frame count)")
        self.grid_size = (int(grid_size[0]), int(grid_size[1]))
        self.frames = int(frames)
        self.time_table = nn.Parameter(torch.empty(self.frames, dim))
        self.space_table = nn.Parameter(torch.empty(*self.grid_size, dim))
        # MAE-ST initialises both tables with trunc_normal_(std=0.02).
        init_table(self.time_table, init_std)
        init_table(self.space_table, init_std)

    @property
    def sizes(self) -> tuple[int, int, int]:
        return (self.frames, *self.grid_size)

    def lookup(self, coords: torch.Tensor, grid: tuple[int, int, int] | None = None) -> torch.Tensor:
        """Embedding of each (t, row, col): exact rows at integer cells, interpolated between.

        ``grid``: the data's statement that ``coords`` are the integer cells of
        that (frames, rows, cols) grid, checked against the tables without
        reading the tensor; otherwise the coordinates are read where that is
        free (a CPU call), and the interpolated lookup serves every other case.
        """
        if grid is None and readable(coords) and coords.numel():
            t, rows, cols = split_coords3d(coords)
            if any(a.min() < -0.5 or a.max() > n - 0.5 for a, n in zip((t, rows, cols), self.sizes, strict=True)):
                raise self._out_of_range(f"t {t.max().item():g}, row {rows.max().item():g}, col {cols.max().item():g}")
            if torch.equal(coords, coords.round()):
                grid = self.sizes
        if grid is None:
            t = split_coords3d(coords)[0]
            return sample_time_table(self.time_table, t) + sample_grid_table(self.space_table, coords[..., 1:])
        if any(g > n for g, n in zip(grid, self.sizes, strict=True)):
            raise self._out_of_range(f"t {grid[0] - 1}, row {grid[1] - 1}, col {grid[2] - 1}")
        index = coords.long()
        return self.time_table[index[..., 0]] + self.space_table[index[..., 1], index[..., 2]]

    def _out_of_range(self, where: str) -> PoslabError:
        frames, gh, gw = self.sizes
        return PoslabError(
            f"learned3d: video coordinates reach {where} but the tables are {frames} frames x {gh}x{gw}; "
            "evaluate with data.coords=rescaled to resample them"
        )

    def encode_input(self, x, pos):
        grid = pos.coords3d_grid if isinstance(pos, Positions) else None
        return x + self.lookup(self.field(pos).to(x.device), grid).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, frames={self.frames}, grid_size={self.grid_size}"
