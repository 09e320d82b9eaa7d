"""What ``poslab show`` draws for vision: a square patch grid, as the ViT paper's Fig. 7 does."""

from __future__ import annotations

import math

from poslab.encoders.grid import grid_coordinates
from poslab.modalities import Canvas
from poslab.positions import Positions


def canvas(length: int | None) -> Canvas:
    """``length`` patches rounded down to a square grid (default 7 x 7)."""
    side = max(1, math.isqrt(length or 49))
    grid = (side, side)
    return Canvas(
        positions=Positions(coords=grid_coordinates(grid), coords_grid=grid),
        length=side * side,
        context={"grid_size": grid, "bidirectional": True},
        layout=grid,
        axes=("row", "col"),
        reference=(side // 2) * side + side // 2,
        caption=f"a {side}x{side} patch grid",
    )
