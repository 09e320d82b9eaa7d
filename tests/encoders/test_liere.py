"""``liere`` / ``liere3d`` against Ostmeier et al. 2024: R(p) = exp(Σ_k p_k·A_k), A_k skew-symmetric."""

from __future__ import annotations

import math

import pytest
import torch

from poslab.config.composition import compose
from poslab.encoders import build_encoder


def test_rotations_are_orthogonal_with_determinant_one():
    enc = build_encoder("liere", dim=32, num_heads=2, grid_size=(4, 4))
    coords = torch.tensor([[r, c] for r in range(4) for c in range(4)], dtype=torch.float32)
    rotation = enc.rotations(coords)  # [heads, L, blocks, b, b]
    eye = torch.eye(16).expand_as(rotation)
    torch.testing.assert_close(rotation.transpose(-1, -2) @ rotation, eye, atol=1e-4, rtol=0)
    torch.testing.assert_close(torch.linalg.det(rotation), torch.ones(rotation.shape[:-2]), atol=1e-3, rtol=0)
    torch.testing.assert_close(enc.generators(), -enc.generators().transpose(-1, -2))


def test_a_two_by_two_generator_is_the_rope_rotation_written_out():
    """A = [[0, u], [−u, 0]]: exp(p·A) turns by −p·u (p = row / grid, the reference's U − Uᵀ sign)."""
    enc = build_encoder("liere", dim=2, num_heads=1, block_size=2, grid_size=(1, 1))
    with torch.no_grad():
        enc.raw.zero_()
        enc.raw[0, 0, 0, 0, 0, 1] = 0.7  # row axis (set 0: one shared without the model's depth)
        enc.raw[0, 0, 1, 0, 0, 1] = 0.2  # col axis
    x = torch.tensor([1.0, 0.5])
    for row, col in ((0, 0), (1, 0), (2, 3), (5, -1)):
        angle = -(0.7 * row + 0.2 * col)
        golden = torch.tensor([x[0] * math.cos(angle) - x[1] * math.sin(angle),
                               x[0] * math.sin(angle) + x[1] * math.cos(angle)])  # fmt: skip
        got = enc.rotate(x.view(1, 1, 1, 2), torch.tensor([[float(row), float(col)]]))[0, 0, 0]
        torch.testing.assert_close(got, golden, atol=1e-5, rtol=1e-5)


def test_commuting_generators_compose_additively_and_scores_depend_on_the_offset_only():
    enc = build_encoder("liere", dim=8, num_heads=1, block_size=2, grid_size=(4, 4))  # 2x2 blocks commute
    a, b = torch.tensor([[1.0, 2.0]]), torch.tensor([[0.5, -3.0]])
    ra, rb, rab = enc.rotations(a), enc.rotations(b), enc.rotations(a + b)
    torch.testing.assert_close(ra @ rb, rab, atol=1e-5, rtol=1e-5)
    q, k = torch.randn(2, 1, 1, 1, 8).expand(2, 1, 1, 3, 8)  # the same content at three positions
    coords = torch.tensor([[0.0, 0.0], [1.0, 2.0], [2.0, 4.0]])  # equal steps
    scores = enc.rotate(q, coords) @ enc.rotate(k, coords).transpose(-1, -2)
    torch.testing.assert_close(scores[0, 0, 0, 1], scores[0, 0, 1, 2], atol=1e-5, rtol=1e-5)


def test_dense_generators_do_not_commute_in_general():
    """LieRE's extra freedom over RoPE: R(a)R(b) ≠ R(a + b) for dense generators of different axes."""
    enc = build_encoder("liere", dim=8, num_heads=1, grid_size=(1, 1))
    a, b = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0]])
    assert not torch.allclose(enc.rotations(a) @ enc.rotations(b), enc.rotations(a + b), atol=1e-3)


def test_liere3d_reads_three_axes_and_needs_the_training_clip():
    enc = build_encoder("liere3d", dim=32, num_heads=2, grid_size=(2, 2), frames=4)
    assert enc.generators().shape[1] == 3 and enc.extent == (4.0, 2.0, 2.0)
    from poslab.errors import ConfigError

    with pytest.raises(ConfigError, match="liere3d needs encoder.frames"):
        build_encoder("liere3d", dim=32, num_heads=2, grid_size=(2, 2))


@pytest.mark.parametrize(("scale", "rows", "cols"), [("linspace", 3.0, 2.0), ("extent", 4.0, 3.0)])
def test_positions_are_scaled_as_the_reference_scales_them_or_by_the_grid(scale, rows, cols):
    """``linspace`` (default): index i of n patches at i/(n − 1), the reference's ``torch.linspace(0, 1, n)``
    per axis; ``extent``: i/n. A 4 × 3 training grid, a 2 × 2 generator per axis: the angle is written out."""
    enc = build_encoder("liere", dim=2, num_heads=1, block_size=2, grid_size=(4, 3), position_scale=scale)
    assert compose(["encoder=liere"]).encoder.position_scale == "linspace"  # the reference's, by default
    with torch.no_grad():
        enc.raw.zero_()
        enc.raw[0, 0, 0, 0, 0, 1] = 0.7  # row axis (set 0: one shared without the model's depth)
        enc.raw[0, 0, 1, 0, 0, 1] = 0.2  # col axis
    x = torch.tensor([1.0, 0.5])
    reference_rows, reference_cols = torch.linspace(0, 1, 4), torch.linspace(0, 1, 3)
    for row, col in ((0, 0), (3, 2), (1, 2), (5, 4)):  # (5, 4): past the training grid
        angle = -(0.7 * row / rows + 0.2 * col / cols)
        golden = torch.tensor([x[0] * math.cos(angle) - x[1] * math.sin(angle),
                               x[0] * math.sin(angle) + x[1] * math.cos(angle)])  # fmt: skip
        got = enc.rotate(x.view(1, 1, 1, 2), torch.tensor([[float(row), float(col)]]))[0, 0, 0]
        torch.testing.assert_close(got, golden, atol=1e-4, rtol=1e-4)  # float32 matrix_exp
        if scale == "linspace" and row < 4 and col < 3:  # on the training grid: the reference's positions
            assert row / rows == pytest.approx(reference_rows[row].item()) and col / cols == pytest.approx(
                reference_cols[col].item()
            )


def test_the_defaults_are_the_references_training_settings():
    """Dense generators, one set per head and per layer (the reference trains with
    ``rotary_embedding_per_layer: True``), positions on the reference's linspace(0, 1, n)."""
    import inspect

    from poslab.encoders.liere import LieRE

    defaults = {k: p.default for k, p in inspect.signature(LieRE).parameters.items() if k not in ("dim", "num_heads")}
    assert defaults == {"block_size": None, "per_head": True, "grid_size": None, "position_scale": "linspace",
                        "per_layer": True, "depth": None}  # fmt: skip
