"""Moving-MNIST-style clips made from the embedded MNIST digits: no download, seeded.

After Srivastava et al. 2015's Moving MNIST, with one digit: it starts at a
random place on a blank square canvas and moves at a constant velocity in one
of 8 directions (k · 45°, counter-clockwise from east: ``speed`` pixels a frame
along each axis it moves on, so a diagonal step moves on both), bouncing off
the walls (the velocity component that would leave the canvas flips). The
label is the direction it started in, or the digit. Pure functions of tensors
and a seed.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

#: Direction k moves at angle k · 45° counter-clockwise from east (up is north: rows decrease).
DIRECTIONS = ("E", "NE", "N", "NW", "W", "SW", "S", "SE")
#: (row, col) step of each direction, in units of ``speed``.
STEPS = ((0, 1), (-1, 1), (-1, 0), (-1, -1), (0, -1), (1, -1), (1, 0), (1, 1))


def velocities(direction: torch.Tensor, speed: float) -> torch.Tensor:
    """``[N]`` direction indices -> ``[N, 2]`` (row, col) pixels per frame."""
    return torch.tensor(STEPS, dtype=torch.float64)[direction] * speed


def trajectories(start: torch.Tensor, velocity: torch.Tensor, frames: int, room: int) -> torch.Tensor:
    """Top-left corners ``[N, frames, 2]`` (integers) of a digit moving from ``start`` inside ``[0, room]``.

    Each frame adds the velocity; a coordinate past a wall is reflected back
    and that velocity component flips (an elastic bounce).
    """
    pos, vel = start.double().clone(), velocity.double().clone()
    out = [pos.clone()]
    for _ in range(frames - 1):
        pos = pos + vel
        low, high = pos < 0, pos > room
        pos = torch.where(low, -pos, torch.where(high, 2 * room - pos, pos))
        vel = torch.where(low | high, -vel, vel)
        out.append(pos.clone())
    return torch.stack(out, dim=1).round().long().clamp(0, room)


def render(digits: torch.Tensor, corners: torch.Tensor, canvas: int) -> torch.Tensor:
    """Digits ``[N, s, s]`` uint8 placed at ``corners`` ``[N, T, 2]`` -> clips ``[N, T, 1, canvas, canvas]`` uint8."""
    n, frames, _ = corners.shape
    size = digits.shape[-1]
    clips = torch.zeros(n, frames, canvas, canvas, dtype=torch.uint8)
    rows = corners[..., 0, None] + torch.arange(size)  # [N, T, s]
    cols = corners[..., 1, None] + torch.arange(size)
    clip = torch.arange(n)[:, None, None, None]
    frame = torch.arange(frames)[None, :, None, None]
    clips[clip, frame, rows[..., :, None], cols[..., None, :]] = digits[:, None]
    return clips.unsqueeze(2)


def resize_digits(images: torch.Tensor, size: int) -> torch.Tensor:
    """uint8 ``[N, 1, 28, 28]`` -> uint8 ``[N, size, size]`` (antialiased bilinear)."""
    x = images.float()
    if x.shape[-1] != size:
        x = F.interpolate(x, size=(size, size), mode="bilinear", antialias=True, align_corners=False)
    return x.squeeze(1).round().clamp(0, 255).to(torch.uint8)


def make_clips(
    digits: torch.Tensor, *, frames: int, canvas: int, speed: float, seed: int, plan_frames: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """One clip per digit: ``(clips [N, T, 1, canvas, canvas] uint8, directions [N])``.

    Each start is drawn uniformly from the places from which the first steps
    move without touching a wall: the first ``plan_frames − 1`` steps (default:
    the whole clip) where they fit on the canvas, else as many as fit — at
    least the first, so the first two frames always show the labelled
    direction. Starts lie on a lattice of ``speed`` pixels from the walls, so a
    digit moving a whole patch a frame (``speed`` = the patch size) always
    covers whole patches the same way: a frame's patches then look the same
    wherever the digit is, and only positions tell the frames' places apart.

    The start and direction depend only on ``seed``, the clip's index and
    ``plan_frames``: a longer clip (``frames`` > ``plan_frames``) continues the
    same motion, and on a larger canvas the digit starts at the same fraction of
    its range.
    """
    n, size = digits.shape[0], digits.shape[-1]
    if size > canvas:
        raise ValueError(f"data.digit_size={size} does not fit data.canvas={canvas}")
    generator = torch.Generator().manual_seed(seed)
    direction = torch.randint(0, len(DIRECTIONS), (n,), generator=generator)
    start_fraction = torch.rand(n, 2, generator=generator, dtype=torch.float64)
    room = canvas - size
    velocity = velocities(direction, speed)
    steps = max(1, min((plan_frames or frames) - 1, int(room // speed)))  # wall-free steps from the start
    travel = velocity * steps
    low, high = (-travel).clamp(min=0), room - travel.clamp(min=0)
    lattice = torch.floor((high - low) / speed + 1e-9) + 1  # start places per axis, ``speed`` apart
    start = low + torch.floor(start_fraction * lattice).clamp(max=lattice - 1) * speed
    corners = trajectories(start, velocity, frames, room)
    return render(digits, corners, canvas), direction
