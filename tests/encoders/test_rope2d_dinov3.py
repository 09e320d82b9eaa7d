"""``rope2d_dinov3`` against DINOv3's reference (facebookresearch/dinov3 ``RopePositionEmbedding`` and
``rope_apply``), written out here from its source: coordinates, periods, augmentation draws and rotation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from poslab.encoders import build_encoder
from poslab.encoders.grid import grid_coordinates
from poslab.errors import ConfigError
from poslab.modalities.vision.data import patch_coordinates
from poslab.positions import Positions


def reference_sin_cos(D, H, W, base=100.0, min_period=None, max_period=None, normalize="separate", shift=None,
                      jitter=None, rescale=None, training=False):  # fmt: skip
    """``RopePositionEmbedding.forward(H=H, W=W)`` for one head of D channels (float32, as dtype=None)."""
    if base is not None:
        periods = base ** (2 * torch.arange(D // 4, dtype=torch.float32) / (D // 2))
    else:
        ratio = max_period / min_period
        periods = ratio ** torch.linspace(0, 1, D // 4) / ratio * max_period
    div = {"separate": (H, W), "max": (max(H, W),) * 2, "min": (min(H, W),) * 2}[normalize]
    coords_h = torch.arange(0.5, H, dtype=torch.float32) / div[0]
    coords_w = torch.arange(0.5, W, dtype=torch.float32) / div[1]
    coords = torch.stack(torch.meshgrid(coords_h, coords_w, indexing="ij"), dim=-1).flatten(0, 1)
    coords = 2.0 * coords - 1.0
    if training and shift is not None:
        coords += torch.empty(2).uniform_(-shift, shift)[None, :]
    if training and jitter is not None:
        coords *= torch.empty(2).uniform_(-np.log(jitter), np.log(jitter)).exp()[None, :]
    if training and rescale is not None:
        coords *= torch.empty(1).uniform_(-np.log(rescale), np.log(rescale)).exp()
    angles = 2 * math.pi * coords[:, :, None] / periods[None, None, :]
    angles = angles.flatten(1, 2).tile(2)
    return torch.sin(angles), torch.cos(angles)


def reference_rope_apply(x, sin, cos):
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


CASES = [
    ({}, (4, 4)),
    ({"normalize": "max"}, (3, 5)),
    ({"normalize": "min"}, (3, 5)),
    ({"normalize": "separate"}, (3, 5)),
    ({"base": None, "min_period": 0.5, "max_period": 20.0}, (4, 6)),
    ({"base": 10.0}, (2, 2)),
]


@pytest.mark.parametrize(("options", "grid"), CASES, ids=lambda v: str(v))
def test_queries_rotate_as_dinov3s_reference(options, grid):
    torch.manual_seed(0)
    enc = build_encoder("rope2d_dinov3", dim=32, num_heads=2, grid_size=grid, **options).eval()
    q = torch.randn(3, 2, grid[0] * grid[1], 16)
    ours = enc.rotate(q, Positions(coords=grid_coordinates(grid), coords_grid=grid))
    sin, cos = reference_sin_cos(16, *grid, **options)
    torch.testing.assert_close(ours, reference_rope_apply(q, sin, cos), atol=2e-5, rtol=1e-5)


def test_at_another_resolution_rescaled_coordinates_are_the_references_at_that_grid():
    """Trained on 4 x 4 patches, shown 7 x 7: the data's rescaled coordinates normalise to what DINOv3 computes
    for a 7 x 7 grid; raw ones run past +-1 (grid cells of the training grid)."""
    enc = build_encoder("rope2d_dinov3", dim=32, num_heads=2, grid_size=(4, 4)).eval()
    q = torch.randn(1, 2, 49, 16)
    rescaled = patch_coordinates((7, 7), (4, 4), "rescaled")
    sin, cos = reference_sin_cos(16, 7, 7)
    torch.testing.assert_close(enc.rotate(q, Positions(coords=rescaled)), reference_rope_apply(q, sin, cos),
                               atol=2e-5, rtol=1e-5)  # fmt: skip
    raw = enc.normalised(patch_coordinates((7, 7), (4, 4), "raw"))
    assert raw.max().item() == pytest.approx(2 * 6.5 / 4 - 1)


@pytest.mark.parametrize(
    "augment", [{"shift": 0.5}, {"jitter": 1.5}, {"rescale": 2.0}, {"shift": 0.2, "jitter": 1.3, "rescale": 2.0}]
)
def test_training_draws_the_references_shift_jitter_and_rescale_once_a_step(augment):
    """The same draws from the same generator state, in the reference's order; every layer of a step shares
    them; the next step draws again; evaluation draws nothing."""
    enc = build_encoder("rope2d_dinov3", dim=32, num_heads=2, grid_size=(4, 4), **augment).train()
    pos = Positions(coords=grid_coordinates((4, 4)), coords_grid=(4, 4))
    q = torch.randn(2, 2, 16, 16)
    enc.train_progress(0.0)
    torch.manual_seed(7)
    first = enc.rotate(q, pos)
    torch.manual_seed(7)
    sin, cos = reference_sin_cos(16, 4, 4, **augment, training=True)
    torch.testing.assert_close(first, reference_rope_apply(q, sin, cos), atol=2e-5, rtol=1e-5)
    assert torch.equal(enc.rotate(q, pos), first)  # the next layer of the same step
    enc.train_progress(0.1)
    assert not torch.allclose(enc.rotate(q, pos), first)  # a new step, a new draw
    sin, cos = reference_sin_cos(16, 4, 4)
    torch.testing.assert_close(enc.eval().rotate(q, pos), reference_rope_apply(q, sin, cos), atol=2e-5, rtol=1e-5)


def test_dinov3s_periods_and_a_golden_angle():
    """DINOv3's default: base 100 (D = 16: periods 100^(k/4), 1 ... 31.6); the patch (0, 0) of a 4 x 4 grid sits
    at (-0.75, -0.75) and turns by 2π · 0.75 / 1 on the first pair."""
    enc = build_encoder("rope2d_dinov3", dim=32, num_heads=2, grid_size=(4, 4))
    torch.testing.assert_close(enc.periods, torch.tensor([1.0, 100**0.25, 10.0, 100**0.75], dtype=torch.float64))
    angles = enc.angles(torch.tensor([[0.0, 0.0], [3.0, 1.0]]))
    assert angles[0, 0].item() == pytest.approx(2 * math.pi - 2 * math.pi * 0.75, abs=1e-6)  # reduced mod 2π
    assert angles[1, 4].item() == pytest.approx((2 * math.pi * -0.25 / 1.0) % (2 * math.pi), abs=1e-6)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"base": 100.0, "min_period": 1.0, "max_period": 10.0}, "either base or min_period and max_period"),
        ({"base": None, "min_period": 1.0}, "either base or min_period and max_period"),
        ({"grid_size": None}, "needs encoder.grid_size"),
        ({"jitter": 0.5}, "jitter"),
    ],
)
def test_bad_options_are_one_line(options, message):
    with pytest.raises(ConfigError, match=message):
        build_encoder("rope2d_dinov3", dim=32, num_heads=2, **({"grid_size": (4, 4)} | options))
