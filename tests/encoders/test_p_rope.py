"""p-RoPE (Barbero et al. 2025): the highest fraction p of RoPE's frequencies kept, the rest set to zero."""

from __future__ import annotations

import math

import torch

from poslab.encoders import build_encoder


def rotate_half_layout(x, position, thetas):
    """Pairs (x_j, x_{j+R}) rotated by position·θ_j, written out channel by channel."""
    out = x.clone()
    half = len(x) // 2
    for j, theta in enumerate(thetas):
        a, b, angle = x[j], x[j + half], position * theta
        out[j], out[j + half] = a * math.cos(angle) - b * math.sin(angle), a * math.sin(angle) + b * math.cos(angle)
    return out


def test_the_lowest_frequencies_become_zero_and_the_kept_ones_are_the_top_of_the_full_ladder():
    base, head_dim = 100.0, 8
    x = torch.randn(1, 1, 5, head_dim)
    got = build_encoder("rope", dim=head_dim, num_heads=1, base=base, frequency_fraction=0.5).rotate(x, torch.arange(5))
    thetas = [base ** (-2 * j / head_dim) for j in range(2)] + [0.0, 0.0]  # 1, base^-1/4, then no rotation
    for n in range(5):
        torch.testing.assert_close(got[0, 0, n], rotate_half_layout(x[0, 0, n], n, thetas), rtol=1e-5, atol=1e-5)


def test_p_rope_is_not_partial_rotary_and_its_ends_are_nope_and_rope():
    x, positions = torch.randn(1, 2, 6, 8), torch.arange(6)

    def rotated(**options):
        return build_encoder("rope", dim=16, num_heads=2, **options).rotate(x, positions)

    # partial rotary lays the whole ladder over the first half: its second pair turns by base^-1/2, not base^-1/4
    assert not torch.allclose(rotated(frequency_fraction=0.5), rotated(rotary_fraction=0.5))
    torch.testing.assert_close(rotated(frequency_fraction=0.0), x)  # p = 0: NoPE
    torch.testing.assert_close(rotated(frequency_fraction=1.0), rotated())  # p = 1: RoPE
