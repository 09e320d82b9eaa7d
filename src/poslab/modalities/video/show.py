"""What ``poslab show`` draws for video: frames x a patch grid, as the default clip cuts it (8 x 4 x 4)."""

from __future__ import annotations

from poslab.modalities import Canvas
from poslab.modalities.video.data import clip_positions

FRAMES, CELLS = 8, 4


def canvas(length: int | None) -> Canvas:
    """``length`` = frames (default 8) of a 4x4 grid; the reference token is the centre patch of the middle frame."""
    frames = length or FRAMES
    grid = (CELLS, CELLS)
    return Canvas(
        positions=clip_positions(frames, grid),
        length=frames * CELLS * CELLS,
        context={"grid_size": grid, "frames": frames, "max_len": frames, "bidirectional": True},
        layout=(frames, *grid),
        axes=("frame", "row", "col"),
        reference=(frames // 2) * CELLS * CELLS + (CELLS // 2) * CELLS + CELLS // 2,
        caption=f"{frames} frames of a {CELLS}x{CELLS} patch grid: scores with the centre patch of frame {frames // 2}",
    )
