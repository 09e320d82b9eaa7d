"""Positions are data: one small structure carried next to every batch.

The data module fills the fields its modality has; each encoder reads the one
field it declares (``PositionEncoder.reads``). Nothing downstream assumes
``arange(L)``, which is what makes rescaled patch grids, randomized positions,
irregular time steps and cache offsets work without special cases.

Besides the tensors, the data states a few facts it knows for free — that the
steps are consecutive, an upper bound on them, that coordinates are the integer
cells of a grid. Encoders read these plain Python values instead of the
tensors' contents, so a hook never waits for the device (no ``.item()`` per
step on a GPU, no graph break under ``torch.compile``). A fact left ``None`` is
unknown: encoders then take their general path, and read a tensor only where
that costs nothing (:func:`readable`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

#: Field names, in the order they are documented.
POSITION_FIELDS = ("steps", "coords", "times", "coords3d")


@dataclass(frozen=True)
class Positions:
    """Token positions of one batch; unused fields stay None.

    steps:  ``[L]`` or ``[B, L]`` step indices (text, time-series steps).
    coords: ``[L, 2]`` or ``[B, L, 2]`` (row, col) patch coordinates, float,
            in units of the *training* patch grid when rescaled.
    times:  ``[L]`` or ``[B, L]`` timestamps in seconds (time series).
    coords3d: ``[L, 3]`` or ``[B, L, 3]`` (t, row, col) of a video patch, float:
            frame index and patch cell, in units of the *training* clip when rescaled.

    Facts (plain Python, optional):

    steps_start: the steps are ``steps_start + arange(L)`` for every sequence
                 (offset-only biases are then Toeplitz: built from 2L − 1 values).
    steps_end:   every step is below it (a table's size, a learned table's check).
    coords_grid: ``coords`` are the integer cells of this (rows, cols) grid.
    coords3d_grid: ``coords3d`` are the integer cells of this (frames, rows, cols) grid.
    """

    steps: torch.Tensor | None = None
    coords: torch.Tensor | None = None
    times: torch.Tensor | None = None
    steps_start: int | None = None
    steps_end: int | None = None
    coords_grid: tuple[int, int] | None = None
    coords3d: torch.Tensor | None = None
    coords3d_grid: tuple[int, int, int] | None = None

    @classmethod
    def consecutive(cls, length: int, start: int = 0, device: torch.device | str | None = None, **other) -> Positions:
        """Steps ``start .. start + length − 1`` with the facts that say so."""
        steps = torch.arange(start, start + length, device=device)
        return cls(steps=steps, steps_start=start, steps_end=start + length, **other)

    def to(self, device: torch.device | str) -> Positions:
        return replace(
            self,
            **{name: getattr(self, name).to(device) for name in POSITION_FIELDS if getattr(self, name) is not None},
        )

    def available(self) -> tuple[str, ...]:
        return tuple(name for name in POSITION_FIELDS if getattr(self, name) is not None)


def readable(t: torch.Tensor) -> bool:
    """Whether reading ``t``'s values costs nothing: a CPU tensor outside ``torch.compile``.

    On an accelerator that read would wait for the device, and under
    ``torch.compile`` it would break the graph; on the ``meta`` device there
    are no values at all.
    """
    return t.device.type == "cpu" and not torch.compiler.is_compiling()


def steps_start(pos: Positions | torch.Tensor) -> int | None:
    """The first step when the steps are consecutive integers shared by the batch, else None.

    From the data's fact; for a plain tensor, from its values where they are
    free to read (a notebook call), otherwise unknown.
    """
    if isinstance(pos, Positions):
        return pos.steps_start
    t = pos
    if t.dim() != 1 or t.numel() == 0 or not readable(t):
        return None
    if t.is_floating_point() and not torch.equal(t, t.round()):
        return None
    start = int(t[0])
    return start if torch.equal(t.long(), torch.arange(start, start + t.numel())) else None


def steps_end(pos: Positions | torch.Tensor) -> int | None:
    """An exclusive upper bound on the steps (known, or read where free), else None."""
    if isinstance(pos, Positions):
        if pos.steps_end is not None:
            return pos.steps_end
        pos = pos.steps
        if pos is None:
            return None
    if pos.numel() == 0 or not readable(pos):
        return None
    return int(pos.max()) + 1
