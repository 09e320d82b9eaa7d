"""The 2D encoders against their papers: golden values and properties."""

from __future__ import annotations

import math

import pytest
import torch

from poslab.encoders import build_encoder
from poslab.encoders.grid import grid_coordinates, resample_grid_table, sample_grid_table
from poslab.encoders.rope2d_mixed import init_mixed_frequencies
from poslab.errors import PoslabError
from poslab.positions import Positions
from tests.encoders.test_registry import build


def coords_of(*pairs):
    return torch.tensor(pairs, dtype=torch.float32)


# -- sincos2d ---------------------------------------------------------------------------
def test_sincos2d_golden_values_mae_order():
    """dim 8 at (row 1, col 2): [sin 2, sin .02, cos 2, cos .02 | sin 1, sin .01, cos 1, cos .01].

    MAE's get_2d_sincos_pos_embed with T = 10000: the first half encodes the
    column (its meshgrid(w, h)), each half is [sin(p·ω), cos(p·ω)], ω = 1/T^(k/2).
    """
    enc = build_encoder("sincos2d", dim=8, num_heads=2)
    out = enc.encode_input(torch.zeros(1, 1, 8), coords_of((1, 2)))[0, 0]
    golden = torch.tensor([0.909297, 0.019999, -0.416147, 0.999800, 0.841471, 0.010000, 0.540302, 0.999950])
    torch.testing.assert_close(out, golden, atol=1e-6, rtol=0)


def test_sincos2d_first_half_is_the_column():
    enc = build_encoder("sincos2d", dim=16, num_heads=2)
    a, b = enc.table(coords_of((0, 3), (5, 3)))  # same column, different rows
    torch.testing.assert_close(a[:8], b[:8])
    assert not torch.allclose(a[8:], b[8:])


def test_sincos2d_needs_dim_divisible_by_4():
    with pytest.raises(PoslabError, match="divisible by 4"):
        build_encoder("sincos2d", dim=6, num_heads=1)


# -- learned2d --------------------------------------------------------------------------
def test_resampling_to_the_same_grid_is_the_identity():
    table = torch.randn(5, 7, 4)
    assert torch.equal(resample_grid_table(table, (5, 7)), table)


def keys_cubic(d: float, a: float = -0.75) -> float:
    """Keys (1981) cubic convolution kernel; PyTorch's bicubic uses a = −0.75."""
    d = abs(d)
    if d <= 1:
        return (a + 2) * d**3 - (a + 3) * d**2 + 1
    if d < 2:
        return a * d**3 - 5 * a * d**2 + 8 * a * d - 4 * a
    return 0.0


def bicubic_resize(table: torch.Tensor, new_grid: tuple[int, int]) -> torch.Tensor:
    """``[gh, gw, D]`` -> ``[nh, nw, D]``, float64: separable cubic convolution with half-pixel centres
    (align_corners=False: output cell i samples input coordinate (i + 0.5)·n_in/n_out − 0.5), the four taps
    around it clamped to the edge cells."""

    def weights(n_in: int, n_out: int) -> torch.Tensor:
        w = torch.zeros(n_out, n_in, dtype=torch.float64)
        for i in range(n_out):
            x = (i + 0.5) * n_in / n_out - 0.5
            left = math.floor(x)
            for tap in (left - 1, left, left + 1, left + 2):
                w[i, min(max(tap, 0), n_in - 1)] += keys_cubic(x - tap)
        return w

    rows, cols = weights(table.shape[0], new_grid[0]), weights(table.shape[1], new_grid[1])
    return torch.einsum("ir,rcd,jc->ijd", rows, table.double(), cols)


@pytest.mark.parametrize(("old", "new"), [((3, 3), (5, 5)), ((4, 4), (6, 6)), ((3, 4), (7, 5)), ((6, 6), (4, 4))])
def test_learned2d_resamples_its_table_by_bicubic_convolution(old, new):
    """DeiT / rope-vit's resize (F.interpolate bicubic, align_corners=False, no antialias), against cubic
    convolution written out here: both the table resize and the encoder's lookup at rescaled coordinates."""
    from poslab.modalities.vision.data import patch_coordinates

    torch.manual_seed(0)
    enc = build_encoder("learned2d", dim=8, num_heads=2, grid_size=old)
    with torch.no_grad():
        enc.table.normal_()
    table = enc.table.detach()
    expected = bicubic_resize(table, new).float()
    torch.testing.assert_close(resample_grid_table(table, new), expected, atol=1e-5, rtol=1e-5)
    looked_up = enc.lookup(patch_coordinates(new, old, "rescaled")).detach().reshape(*new, 8)
    torch.testing.assert_close(looked_up, expected, atol=1e-5, rtol=1e-5)
    # timm's resample_abs_pos_embed antialiases by default: another kernel, visibly different values
    antialiased = torch.nn.functional.interpolate(
        table.permute(2, 0, 1)[None], size=new, mode="bicubic", align_corners=False, antialias=True
    )[0].permute(1, 2, 0)
    assert (antialiased - expected).abs().max() > 0.05


def test_learned2d_integer_coords_read_table_rows_exactly():
    enc = build_encoder("learned2d", dim=8, num_heads=2, grid_size=(3, 3))
    out = enc.lookup(coords_of((0, 0), (2, 1), (1, 2)))
    torch.testing.assert_close(out, torch.stack([enc.table[0, 0], enc.table[2, 1], enc.table[1, 2]]))


def test_learned2d_at_rescaled_coords_equals_resampling_the_table():
    from poslab.modalities.vision.data import patch_coordinates

    enc = build_encoder("learned2d", dim=8, num_heads=2, grid_size=(4, 4))
    coords = patch_coordinates((8, 8), (4, 4), "rescaled")
    expected = resample_grid_table(enc.table.detach(), (8, 8)).reshape(64, 8)
    torch.testing.assert_close(enc.lookup(coords).detach(), expected, atol=1e-5, rtol=0)


def test_learned2d_raw_coords_past_the_table_are_a_clear_error():
    enc = build_encoder("learned2d", dim=8, num_heads=2, grid_size=(4, 4))
    with pytest.raises(PoslabError, match="table is 4x4; evaluate with data.coords=rescaled"):
        enc.lookup(grid_coordinates((8, 8)))


def test_sample_grid_table_interpolates_between_cells():
    table = torch.arange(4.0).view(2, 2, 1)  # linear in both axes: bicubic keeps it
    torch.testing.assert_close(sample_grid_table(table, coords_of((0.5, 0.5)))[0], torch.tensor([1.5]))


# -- rope2d / rope2d_mixed ----------------------------------------------------------------
def scores(enc, q, k, pos_q, pos_k):
    return (enc.rotate(q, pos_q) * enc.rotate(k, pos_k)).sum(-1)


@pytest.mark.parametrize("name", ["rope2d", "rope2d_mixed"])
@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_2d_rope_scores_depend_only_on_the_2d_offset(name, layout):
    torch.manual_seed(0)
    enc = build_encoder(name, dim=32, num_heads=2, layout=layout)
    q, k = torch.randn(1, 2, 1, 16), torch.randn(1, 2, 1, 16)
    base = scores(enc, q, k, coords_of((1, 2)), coords_of((3, 0)))
    for shift in [(5, 7), (-1, 3), (0.5, 2.25)]:
        shifted = scores(enc, q, k, coords_of((1 + shift[0], 2 + shift[1])), coords_of((3 + shift[0], 0 + shift[1])))
        torch.testing.assert_close(shifted, base, atol=1e-4, rtol=0)
    other = scores(enc, q, k, coords_of((1, 2)), coords_of((0, 3)))
    assert not torch.allclose(other, base, atol=1e-3)


def test_rope2d_axial_frequencies_follow_rope_vit():
    """Column angles in the first half of the pairs, row angles in the second, 1/100^(4k/Dh)."""
    enc = build_encoder("rope2d", dim=32, num_heads=2)  # head dim 16 -> 4 frequencies per axis
    expected = 1.0 / 100.0 ** (torch.arange(0, 16, 4, dtype=torch.float64) / 16)
    torch.testing.assert_close(enc.inv_freq, expected)
    angles = enc.angles(coords_of((3, 2)))[0]
    torch.testing.assert_close(angles[:4], (2 * expected).float())
    torch.testing.assert_close(angles[4:], (3 * expected).float())


def test_rope2d_mixed_init_matches_rope_vit():
    """rope-vit ``init_random_2d_freqs`` (Heo et al. 2024), written out: per head an angle a = 2π·U[0, 1) (one
    ``torch.rand(1)`` per head), magnitudes 1/base^(4k/Dh); freqs_x = [mag·cos a, mag·cos(a + π/2)],
    freqs_y = [mag·sin a, mag·sin(a + π/2)]. x is the column (``compute_mixed_cis``: t_x = t % end_x)."""
    heads, head_dim, base = 3, 16, 10.0
    torch.manual_seed(0)
    angle = [torch.rand(1) * 2 * math.pi for _ in range(heads)]
    mag = 1.0 / base ** (torch.arange(0, head_dim, 4)[: head_dim // 4].float() / head_dim)
    fx = torch.stack([torch.cat((mag * torch.cos(a), mag * torch.cos(math.pi / 2 + a))) for a in angle])
    fy = torch.stack([torch.cat((mag * torch.sin(a), mag * torch.sin(math.pi / 2 + a))) for a in angle])
    torch.manual_seed(0)
    freqs = init_mixed_frequencies(head_dim=head_dim, num_heads=heads, base=base)
    torch.testing.assert_close(freqs, torch.stack((fx, fy)))
    # whatever the draw: the second half is the first turned by +π/2, from x towards y
    torch.testing.assert_close(freqs[0, :, 4:], -freqs[1, :, :4])
    torch.testing.assert_close(freqs[1, :, 4:], freqs[0, :, :4])


def test_rope2d_mixed_turns_pairs_by_col_times_fx_plus_row_times_fy():
    """Eq. 11: pair t of head h at (row r, col c) turns by c·f^x_{h,t} + r·f^y_{h,t} (interleaved pairs)."""
    enc = build_encoder("rope2d_mixed", dim=32, num_heads=2)
    fx, fy = enc.freqs.detach()[0, 0].double(), enc.freqs.detach()[0, 1].double()  # [H, 8] of the one set
    coords = coords_of((0, 1), (1, 0), (2, 5))
    x = torch.tensor([1.0, 0.0]).repeat(8).expand(1, 2, 3, 16)  # every pair (1, 0): turns into (cos, sin)
    out = enc.rotate(x, coords).detach().double()[0]  # [H, L, 16]
    for i, (row, col) in enumerate(coords.tolist()):
        theta = col * fx + row * fy
        torch.testing.assert_close(out[:, i, 0::2], theta.cos(), atol=1e-6, rtol=0)
        torch.testing.assert_close(out[:, i, 1::2], theta.sin(), atol=1e-6, rtol=0)


def test_rope2d_mixed_frequencies_learn():
    enc = build_encoder("rope2d_mixed", dim=16, num_heads=2)
    out = enc.rotate(torch.randn(1, 2, 5, 8), grid_coordinates((1, 5)))
    (out * torch.randn_like(out)).sum().backward()
    assert enc.freqs.grad is not None and enc.freqs.grad.abs().sum() > 0


def test_rope2d_needs_head_dim_divisible_by_4():
    with pytest.raises(PoslabError, match="head dim divisible by 4"):
        build_encoder("rope2d", dim=12, num_heads=2)


def test_rope_similarity_decays_with_distance():
    """RoFormer §3.4.3: with constant q = k, scores fall off with distance (long-term decay)."""
    from poslab.evaluation.similarity import position_similarity

    enc = build_encoder("rope2d", dim=64, num_heads=2)
    s = position_similarity(enc, grid_coordinates((1, 16)), 16)
    assert s[0, 0] == pytest.approx(32 / math.sqrt(32), rel=1e-5)  # Σ over 32 channels of 1·1 / √Dh
    assert s[0, 1] > s[0, 8]


def test_learned2d_uses_the_stated_grid_as_reading_the_coordinates_would():
    """Integer cells stated by the data (coords_grid) pick the same table rows as coordinates read on the CPU."""
    enc = build("learned2d")
    coords = grid_coordinates((4, 4))
    x = torch.zeros(1, 16, 32)
    stated = enc.encode_input(x, Positions(coords=coords, coords_grid=(4, 4)))
    torch.testing.assert_close(stated, enc.encode_input(x, coords))
    torch.testing.assert_close(stated[0, 6], enc.table[1, 2].detach())  # patch 6 = row 1, col 2
