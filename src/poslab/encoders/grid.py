"""Patch-grid helpers shared by the vision and video encoders (pure functions).

Axis order, stated once: positions carry ``(row, col)``; the fixed 2D
embeddings put the **column** in the first half of the channels and the row in
the second, as MAE's ``get_2d_sincos_pos_embed`` does (its ``meshgrid(w, h)``)
and as rope-vit's axial RoPE does.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def split_coords(coords: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``[..., L, 2]`` (row, col) -> (rows ``[..., L]``, cols ``[..., L]``) as float."""
    if coords.shape[-1] != 2:
        raise ValueError(f"2D positions need a trailing (row, col) axis, got shape {tuple(coords.shape)}")
    coords = coords.float()
    return coords[..., 0], coords[..., 1]


def split_coords3d(coords: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``[..., L, 3]`` (t, row, col) -> (t, rows, cols), each ``[..., L]`` float: a video patch's frame and cell."""
    if coords.dim() < 2 or coords.shape[-1] != 3:
        raise ValueError(f"3D positions need a trailing (t, row, col) axis, got shape {tuple(coords.shape)}")
    coords = coords.float()
    return coords[..., 0], coords[..., 1], coords[..., 2]


def grid_coordinates(grid: tuple[int, int], device: torch.device | str | None = None) -> torch.Tensor:
    """Integer (row, col) of a row-major patch grid: ``[gh * gw, 2]`` float."""
    rows, cols = torch.meshgrid(
        torch.arange(grid[0], device=device), torch.arange(grid[1], device=device), indexing="ij"
    )
    return torch.stack((rows.flatten(), cols.flatten()), dim=-1).float()


def sincos_1d(pos: torch.Tensor, dim: int, temperature: float = 10000.0) -> torch.Tensor:
    """MAE's 1D table: ``[sin(p·ω_k), cos(p·ω_k)]`` with ω_k = 1 / T^(k / (dim/2)).

    Vaswani et al. 2017 eq. (PE), in MAE's concatenated (not interleaved)
    order; computed in float64 for exactness, returned in float32.
    """
    half = dim // 2
    omega = 1.0 / temperature ** (torch.arange(half, dtype=torch.float64, device=pos.device) / half)
    angles = pos.to(torch.float64)[..., None] * omega
    return torch.cat((angles.sin(), angles.cos()), dim=-1).float()


def resample_grid_table(table: torch.Tensor, new_grid: tuple[int, int]) -> torch.Tensor:
    """Resize a ``[gh, gw, D]`` position table to ``new_grid``, bicubically.

    DeiT's and rope-vit's resize of position embeddings: ``F.interpolate``,
    bicubic, ``align_corners=False``, without antialiasing (timm's
    ``resample_abs_pos_embed`` antialiases by default, which differs by ~7 % on a
    random 4x4 -> 8x8 table), on a table that holds only grid positions.
    """
    if tuple(table.shape[:2]) == tuple(new_grid):
        return table
    img = table.permute(2, 0, 1).unsqueeze(0).float()
    out = F.interpolate(img, size=tuple(new_grid), mode="bicubic", align_corners=False)
    return out.squeeze(0).permute(1, 2, 0).to(table.dtype)


def sample_grid_table(table: torch.Tensor, coords: torch.Tensor) -> torch.Tensor:
    """Bicubic lookup of a ``[gh, gw, D]`` table at float (row, col) -> ``[..., L, D]``.

    Coordinates are in table cells (cell centres at integers), so the points
    that :func:`resample_grid_table` samples give the same values; integer
    coordinates give table rows exactly.
    """
    gh, gw, dim = table.shape
    rows, cols = split_coords(coords)
    lead = rows.shape[:-1]
    # grid_sample with align_corners=False maps normalised -1..1 to cell edges.
    grid = torch.stack(((2 * cols + 1) / gw - 1, (2 * rows + 1) / gh - 1), dim=-1)
    grid = grid.reshape(1, 1, -1, 2)
    img = table.permute(2, 0, 1).unsqueeze(0)
    out = F.grid_sample(img, grid.to(img.dtype), mode="bicubic", padding_mode="border", align_corners=False)
    return out.reshape(dim, -1).t().reshape(*lead, rows.shape[-1], dim)
