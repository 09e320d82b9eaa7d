"""``rope2d_golden`` against the reference (Xiong 2025, jerryxio.ng/posts/nd-rope, ``GoldenGateRoPE2d``,
transcribed below independently of poslab): per-head directions (h·F + f)·π/φ, magnitudes log-spaced from
ω_min to ω_max both included, coordinates normalised over the grid, pairs in halves; in what attention
computes, the score of the 2D offset alone."""

from __future__ import annotations

import inspect
import math

import pytest
import torch

from poslab.encoders import build_encoder
from poslab.encoders.rope2d_golden import GoldenRoPE2D
from poslab.positions import Positions
from tests.encoders.test_attention_computes import DIM, HEADS
from tests.encoders.test_attention_grids import check_rotary_attention


def reference_cos_sin(image_size, n_heads, head_dim, min_freq, max_freq, p_zero_freqs=0.0):
    """The reference module's buffers (its ``__init__``, float64 here): cos / sin ``[H, W, heads, F]``."""
    n_freqs = head_dim // 2
    n_zero_freqs = round(p_zero_freqs * n_freqs)
    omega = torch.cat(
        (
            torch.zeros(n_zero_freqs, dtype=torch.float64),
            min_freq * (max_freq / min_freq) ** torch.linspace(0, 1, n_freqs - n_zero_freqs, dtype=torch.float64),
        )
    )
    phi = torch.arange(n_heads * n_freqs, dtype=torch.float64).reshape(n_heads, n_freqs) * (
        math.pi * (math.sqrt(5) - 1) / 2
    )
    freqs = omega.unsqueeze(-1) * torch.stack((torch.cos(phi), torch.sin(phi)), dim=-1)
    h, w = image_size
    xlim, ylim = math.sqrt(w / h), math.sqrt(h / w)
    x = torch.linspace(-xlim, xlim, w, dtype=torch.float64).reshape(1, w).expand(h, w)
    y = torch.linspace(-ylim, ylim, h, dtype=torch.float64).reshape(h, 1).expand(h, w)
    theta = (freqs * torch.stack((x, y), dim=-1).reshape(h, w, 1, 1, 2)).sum(dim=-1)
    return theta.cos(), theta.sin()


def reference_forward(x_hw, cos, sin):
    """The reference's ``forward`` on ``[N, H, W, heads, d]``: halves ``chunk(2)``, rotated, concatenated."""
    a, b = x_hw.double().chunk(2, dim=-1)
    return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)


@pytest.mark.parametrize(("grid", "heads", "head_dim", "min_freq", "base", "zero"),
                         [((4, 4), 2, 16, 1.0, 100.0, 0.0), ((3, 5), 3, 8, 0.2, 100.0, 0.25)])  # fmt: skip
def test_rotation_matches_the_reference_module(grid, heads, head_dim, min_freq, base, zero):
    """The same queries through poslab's rotation and the reference's, on a square and a non-square grid (its
    aspect-preserving span), with a share of zero frequencies: equal to float32 round-off."""
    enc = build_encoder("rope2d_golden", dim=heads * head_dim, num_heads=heads, base=base, min_freq=min_freq,
                        zero_freqs=zero, grid_size=grid)  # fmt: skip
    h, w = grid
    torch.manual_seed(0)
    q = torch.randn(2, heads, h * w, head_dim)
    cells = torch.tensor([(r, c) for r in range(h) for c in range(w)], dtype=torch.float32)
    ours = enc.rotate(q, cells)
    cos, sin = reference_cos_sin(grid, heads, head_dim, min_freq, min_freq * base, zero)
    theirs = reference_forward(q.permute(0, 2, 1, 3).reshape(2, h, w, heads, head_dim), cos, sin)
    torch.testing.assert_close(ours.double(), theirs.reshape(2, h * w, heads, head_dim).permute(0, 2, 1, 3),
                               rtol=1e-5, atol=1e-5)  # fmt: skip


def test_angles_at_named_cells():
    """Head dim 4 (F = 2 pairs), 2 heads, a 3 x 3 grid, ω from 1 to 100: pair (h, f) at cell (row 0, col 2),
    i.e. (x, y) = (1, −1), turns by ω_f·(cos φ_hf − sin φ_hf), φ_hf = (2h + f)·π/φ."""
    enc = build_encoder("rope2d_golden", dim=8, num_heads=2, grid_size=(3, 3))
    got = enc.angles(torch.tensor([[0.0, 2.0]]))[:, 0]  # [H, F]
    spacing = math.pi / ((1 + math.sqrt(5)) / 2)
    for h in range(2):
        for f, omega in enumerate((1.0, 100.0)):
            phi = (2 * h + f) * spacing
            assert got[h, f].item() == pytest.approx(omega * (math.cos(phi) - math.sin(phi)), rel=1e-5)
    assert got[0, 0].item() == pytest.approx(1.0)  # pair (0, 0) points along x, at ω_min, x = 1


def test_the_defaults_are_the_references_cifar_setting():
    defaults = {k: p.default for k, p in inspect.signature(GoldenRoPE2D).parameters.items() if k not in ("dim",
                "num_heads")}  # fmt: skip
    assert defaults == {"base": 100.0, "min_freq": 1.0, "zero_freqs": 0.0, "layout": "half", "grid_size": None}


def test_every_head_turns_its_pairs_in_directions_of_their_own():
    """Heads differ (the reference gives head h, pair f the direction (h·F + f)·π/φ): no two of the 2 x 16 pairs
    share an axis, and the closest two are still >= 0.3·π/32 apart."""
    enc = build_encoder("rope2d_golden", dim=64, num_heads=2, grid_size=(4, 4))
    directions = (torch.atan2(enc.freqs[1], enc.freqs[0]) % math.pi).flatten()
    ordered = directions.sort().values
    gaps = torch.diff(torch.cat((ordered, ordered[:1] + math.pi)))
    assert gaps.min() > 0.3 * math.pi / 32
    assert not torch.allclose(enc.freqs[:, 0], enc.freqs[:, 1])


def test_rescaled_coordinates_at_another_size_span_the_training_grid():
    """At twice the resolution the rescaled coordinates of the outer patches land on the training grid's
    outer cells, so their angles are those of the training grid's corners (the reference's scale rule)."""
    enc = build_encoder("rope2d_golden", dim=16, num_heads=2, grid_size=(4, 4))
    corners = enc.angles(torch.tensor([[0.0, 0.0], [3.0, 3.0]]))
    x, y = enc.normalised(torch.tensor([[0.0, 0.0], [3.0, 3.0]]))
    assert x.tolist() == [-1.0, 1.0] and y.tolist() == [-1.0, 1.0]
    torch.testing.assert_close(corners[:, 0], -corners[:, 1])  # opposite corners: opposite angles


@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_attention_scores_follow_the_2d_offset(layout):
    """Every layer attends with Σ_f Re[(q_a + i q_b)(k_a − i k_b) e^{i·Δθ_hf}]/√d, Δθ_hf the pair's angle of
    the offset between the two cells, per head, on a 3 x 4 grid, bidirectional."""
    encoder = build_encoder("rope2d_golden", dim=DIM, num_heads=HEADS, layout=layout, grid_size=(3, 4))
    cells = [(r, c) for r in range(3) for c in range(4)]
    pairs = DIM // HEADS // 2
    cos, sin = reference_cos_sin((3, 4), HEADS, 2 * pairs, 1.0, 100.0)
    angle = torch.atan2(sin, cos).reshape(12, HEADS, pairs).permute(1, 0, 2)  # [H, L, F]
    check_rotary_attention(encoder, Positions(coords=torch.tensor(cells, dtype=torch.float32)), angle, layout)


def test_without_a_grid_it_says_what_it_needs():
    with pytest.raises(Exception, match="rope2d_golden needs encoder.grid_size"):
        build_encoder("rope2d_golden", dim=16, num_heads=2)
