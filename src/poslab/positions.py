"""Positions are data: one small structure carried next to every batch.

The data module fills the fields its modality has; each encoder reads the one
field it declares (``PositionEncoder.reads``). Nothing downstream assumes
``arange(L)``, which is what makes rescaled patch grids, randomized positions,
irregular time steps and cache offsets work without special cases.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import torch

#: Field names, in the order they are documented.
POSITION_FIELDS = ("steps", "coords", "times")


@dataclass(frozen=True)
class Positions:
    """Token positions of one batch; unused fields stay None.

    steps:  ``[L]`` or ``[B, L]`` step indices (text, time-series steps).
    coords: ``[L, 2]`` or ``[B, L, 2]`` (row, col) patch coordinates, float,
            in units of the *training* patch grid when rescaled.
    times:  ``[L]`` or ``[B, L]`` timestamps in seconds (time series).
    """

    steps: torch.Tensor | None = None
    coords: torch.Tensor | None = None
    times: torch.Tensor | None = None

    def to(self, device: torch.device | str) -> Positions:
        return replace(
            self,
            **{f.name: getattr(self, f.name).to(device) for f in fields(self) if getattr(self, f.name) is not None},
        )

    def available(self) -> tuple[str, ...]:
        return tuple(name for name in POSITION_FIELDS if getattr(self, name) is not None)

    def select(self, index: slice | torch.Tensor) -> Positions:
        """Keep a subset of tokens (e.g. a patch permutation): indexes dim -1 / -2."""

        def take(name: str, t: torch.Tensor) -> torch.Tensor:
            token_dim = -2 if name == "coords" else -1
            return t[..., index, :] if token_dim == -2 else t[..., index]

        return replace(
            self,
            **{n: take(n, getattr(self, n)) for n in POSITION_FIELDS if getattr(self, n) is not None},
        )
