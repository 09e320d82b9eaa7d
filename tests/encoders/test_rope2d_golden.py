"""``rope2d_golden`` against its definition (Xiong 2025): pair i turns by ω_i·(col·cos φ_i + row·sin φ_i),
φ_i = i·π/φ, ω_i = base^(−i/P); in what attention computes, the score of the 2D offset alone."""

from __future__ import annotations

import math

import pytest
import torch

from poslab.encoders import build_encoder
from poslab.positions import Positions
from tests.encoders.test_attention_computes import DIM, HEADS
from tests.encoders.test_attention_grids import check_rotary_attention

PHI = (1 + math.sqrt(5)) / 2


def golden_angle(i: int, row: float, col: float, pairs: int, base: float) -> float:
    omega, direction = base ** (-i / pairs), i * math.pi / PHI
    return omega * (col * math.cos(direction) + row * math.sin(direction))


def test_angles_at_named_cells():
    """Head dim 8 (4 pairs), base 100: the angle of every pair at (row 2, col 3) and (row 0, col 1)."""
    enc = build_encoder("rope2d_golden", dim=16, num_heads=2, base=100.0)
    got = enc.angles(torch.tensor([[2.0, 3.0], [0.0, 1.0]]))
    for cell, (row, col) in enumerate(((2, 3), (0, 1))):
        for i in range(4):
            assert got[cell, i].item() == pytest.approx(golden_angle(i, row, col, 4, 100.0), rel=1e-6, abs=1e-7)
    assert got[1, 0].item() == pytest.approx(1.0)  # pair 0 points along the columns at frequency 1
    assert got[0, 1].item() == pytest.approx(100**-0.25 * (3 * math.cos(math.pi / PHI) + 2 * math.sin(math.pi / PHI)))


def test_directions_are_distinct_and_spread_over_the_half_circle():
    """No two of 16 pairs share an axis, and the closest two are still ≥ 0.3·π/16 apart (axial RoPE puts half
    the pairs on each of two directions)."""
    enc = build_encoder("rope2d_golden", dim=64, num_heads=2)
    directions = torch.atan2(enc.freqs[1], enc.freqs[0]) % math.pi
    ordered = directions.sort().values
    gaps = torch.diff(torch.cat((ordered, ordered[:1] + math.pi)))
    assert gaps.min() > 0.3 * math.pi / 16


@pytest.mark.parametrize("layout", ["interleaved", "half"])
@pytest.mark.parametrize("base", [100.0, 10000.0])
def test_attention_scores_follow_the_2d_offset(layout, base):
    """Every layer attends with Σ_i Re[(q_a + i q_b)(k_a − i k_b) e^{i·Δθ_i}]/√d, Δθ_i the pair's angle of the
    offset between the two cells, on a 3 x 4 grid, bidirectional."""
    encoder = build_encoder("rope2d_golden", dim=DIM, num_heads=HEADS, base=base, layout=layout)
    cells = [(r, c) for r in range(3) for c in range(4)]
    pairs = DIM // HEADS // 2
    angle = torch.tensor(
        [[golden_angle(i, r, c, pairs, base) for i in range(pairs)] for r, c in cells], dtype=torch.float64
    )
    check_rotary_attention(encoder, Positions(coords=torch.tensor(cells, dtype=torch.float32)), angle, layout)


def test_scores_see_rows_columns_and_diagonals():
    """A constant query and key: the score changes with a step along a row, a column and a diagonal, and two
    pairs of cells with the same offset score the same."""
    enc = build_encoder("rope2d_golden", dim=16, num_heads=1)
    q = torch.randn(1, 1, 1, 16).expand(1, 1, 5, 16)
    cells = torch.tensor([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0], [2.0, 2.0]])
    s = (enc.rotate(q, cells) @ enc.rotate(q, cells).transpose(-1, -2))[0, 0]
    assert len({round(s[0, j].item(), 4) for j in (1, 2, 3)}) == 3  # row, column and diagonal steps differ
    assert s[0, 3].item() == pytest.approx(s[3, 4].item(), rel=1e-5)  # (0,0)→(1,1) and (1,1)→(2,2)
