"""RoPE math: layouts, the complex form, precision (pitfalls in shared/pitfalls.md)."""

from __future__ import annotations

import math

import pytest
import torch

from poslab.encoders.rotary import apply_rotary, rotation_angles


def test_interleaved_layout_is_complex_multiplication():
    """RoFormer eq. 34 in complex form: (x0 + i x1) * exp(i θ) on adjacent pairs."""
    x = torch.randn(3, 8, dtype=torch.float64)
    theta = torch.randn(3, 4, dtype=torch.float64)
    expected = torch.view_as_real(
        torch.view_as_complex(x.view(3, 4, 2).contiguous()) * torch.polar(torch.ones_like(theta), theta)
    )
    torch.testing.assert_close(
        apply_rotary(x, theta.float(), "interleaved").double(), expected.reshape(3, 8), atol=1e-6, rtol=0
    )


def test_half_layout_is_rotate_half():
    """GPT-NeoX / HF: x * cos + rotate_half(x) * sin with cos/sin repeated over halves."""
    x = torch.randn(5, 8)
    theta = torch.randn(5, 4)
    cos, sin = torch.cat((theta.cos(), theta.cos()), -1), torch.cat((theta.sin(), theta.sin()), -1)
    rotate_half = torch.cat((-x[..., 4:], x[..., :4]), dim=-1)
    torch.testing.assert_close(apply_rotary(x, theta, "half"), x * cos + rotate_half * sin)


@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_rotation_preserves_norm_and_partial_channels(layout):
    x = torch.randn(4, 10)
    out = apply_rotary(x, torch.randn(4, 3), layout)  # 6 of 10 channels rotate
    torch.testing.assert_close(out.norm(dim=-1), x.norm(dim=-1))
    torch.testing.assert_close(out[..., 6:], x[..., 6:])


def test_mixed_layouts_break_the_relative_property():
    """The trap of transformers#25199: q in one layout, k in the other."""
    q, k = torch.randn(8), torch.randn(8)
    inv = 1.0 / 10000 ** (torch.arange(4) / 4)

    def score(m, n, q_layout, k_layout):
        return apply_rotary(q, m * inv, q_layout) @ apply_rotary(k, n * inv, k_layout)

    same = [score(m, m + 3, "half", "half") for m in range(5)]
    mixed = [score(m, m + 3, "half", "interleaved") for m in range(5)]
    assert max(same) - min(same) < 1e-5
    assert max(mixed) - min(mixed) > 1e-2


def test_angles_stay_exact_at_large_positions():
    """float32 angles near 1e5 lose ~1e-3 rad; float64 + reduction mod 2π does not."""
    pos = torch.tensor([100_003.0])
    inv = torch.tensor([1.0, 0.37], dtype=torch.float64)  # frequencies kept in float64, as the encoders do
    exact = torch.tensor([math.cos(100_003.0 * 1.0), math.cos(100_003.0 * 0.37)], dtype=torch.float64)
    ours = rotation_angles(pos, inv).cos()[0].double()
    naive = (pos * inv.float()).cos().double()  # float32 product
    assert (ours - exact).abs().max() < 1e-6
    assert (naive - exact).abs().max() > 1e-4  # the trap is real


def test_last_input_cache_computes_once_per_positions_object():
    from poslab.encoders.rotary import LastInputCache

    cache, calls = LastInputCache(), []

    def compute(t):
        calls.append(1)
        return t * 2

    pos = torch.arange(4.0)
    for _ in range(3):
        torch.testing.assert_close(cache.get(pos, compute), pos * 2)
    assert len(calls) == 1
    pos.add_(1)  # in place: the version counter changes
    torch.testing.assert_close(cache.get(pos, compute), pos * 2)
    other = torch.arange(4.0)  # a new object with other values
    torch.testing.assert_close(cache.get(other, compute), other * 2)
    assert len(calls) == 3


def test_rope2d_cache_follows_new_positions():
    from poslab.encoders import build_encoder
    from poslab.encoders.grid import grid_coordinates

    enc = build_encoder("rope2d", dim=32, num_heads=2)
    q = torch.randn(1, 2, 4, 16)
    a = enc.rotate(q, grid_coordinates((2, 2)))
    b = enc.rotate(q, grid_coordinates((2, 2)) * 2)
    fresh = build_encoder("rope2d", dim=32, num_heads=2).rotate(q, grid_coordinates((2, 2)) * 2)
    torch.testing.assert_close(b, fresh)
    assert not torch.allclose(a, b)
