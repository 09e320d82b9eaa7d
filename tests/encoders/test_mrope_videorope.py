"""The video rotary encoders against their references: M-RoPE (Qwen2-VL) and VideoRoPE.

Golden values are computed here from the reference code's definitions
(HF ``apply_multimodal_rotary_pos_emb``; VideoRoPE's ``apply_m_modify_multimodal_rotary_pos_emb``
and ``get_t_scale_rope_index``), never by calling the encoders' own helpers.
"""

from __future__ import annotations

import math

import pytest
import torch

from poslab.encoders import build_encoder
from poslab.errors import ConfigError, PoslabError
from poslab.positions import Positions


def video_coords(frames: int, rows: int, cols: int) -> torch.Tensor:
    """Row-major (t, row, col) of every patch of a clip: ``[frames * rows * cols, 3]`` float."""
    t, r, c = torch.meshgrid(torch.arange(frames), torch.arange(rows), torch.arange(cols), indexing="ij")
    return torch.stack((t.flatten(), r.flatten(), c.flatten()), dim=-1).float()


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """HF ``rotate_half`` (models/llama/modeling_llama.py)."""
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def hf_cos_sin(position_ids: torch.Tensor, head_dim: int, base: float) -> tuple[torch.Tensor, torch.Tensor]:
    """HF ``Qwen2VLRotaryEmbedding.forward`` (in float64): position_ids ``[3, B, L]`` -> cos, sin ``[3, B, L, Dh]``."""
    inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    freqs = position_ids.double()[..., None] * inv_freq  # [3, B, L, Dh/2]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def hf_apply_multimodal_rotary_pos_emb(q, cos, sin, mrope_section, unsqueeze_dim=1):
    """HF transformers ``models/qwen2_vl/modeling_qwen2_vl.py::apply_multimodal_rotary_pos_emb``, for q only."""
    mrope_section = mrope_section * 2
    cos = torch.cat([m[i % 3] for i, m in enumerate(cos.split(mrope_section, dim=-1))], dim=-1).unsqueeze(unsqueeze_dim)
    sin = torch.cat([m[i % 3] for i, m in enumerate(sin.split(mrope_section, dim=-1))], dim=-1).unsqueeze(unsqueeze_dim)
    return (q * cos) + (rotate_half(q) * sin)


def videorope_reference(q, cos, sin, mrope_section, unsqueeze_dim=1):
    """VideoRoPE ``apply_m_modify_multimodal_rotary_pos_emb`` (videorope-transformer/modeling_videorope.py), q only:
    t moved to the lowest frequencies, h / w interleaved channel by channel."""
    mrope_section = [mrope_section[0], mrope_section[1] + mrope_section[2]]
    mrope_section = (mrope_section * 2)[::-1]
    index, result_cos, result_sin = 0, [], []
    for i, section in enumerate(mrope_section):
        if i % 2 == 0:
            for j in range(section):
                row = 1 if j % 2 == 0 else 2
                result_cos.append(cos[row, ..., index : index + 1])
                result_sin.append(sin[row, ..., index : index + 1])
                index += 1
        else:
            result_cos.append(cos[0, ..., index : index + section])
            result_sin.append(sin[0, ..., index : index + section])
            index += section
    cos = torch.cat(result_cos, dim=-1).unsqueeze(unsqueeze_dim)
    sin = torch.cat(result_sin, dim=-1).unsqueeze(unsqueeze_dim)
    return (q * cos) + (rotate_half(q) * sin)


def videorope_position_ids(frames: int, rows: int, cols: int, scale_factor: float) -> torch.Tensor:
    """VideoRoPE ``get_t_scale_rope_index`` for one clip with no text before it (text_len + st_idx = 0): ``[3, L]``."""
    t_index = torch.arange(frames).view(-1, 1).expand(-1, rows * cols).flatten()
    h_index = torch.arange(rows).view(1, -1, 1).expand(frames, -1, cols).flatten() - (rows - 1) // 2
    w_index = torch.arange(cols).view(1, 1, -1).expand(frames, rows, -1).flatten() - (cols - 1) // 2
    t_index = t_index * scale_factor
    return torch.stack([t_index, h_index + t_index, w_index + t_index]).double()


def scores(enc, q, k, pos_q, pos_k):
    return (enc.rotate(q, pos_q) * enc.rotate(k, pos_k)).sum(-1)


# -- mrope ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("head_dim", "sections", "expected"),
    [(128, None, [16, 24, 24]), (16, None, [2, 3, 3]), (32, None, [4, 6, 6]), (16, [4, 2, 2], [4, 2, 2])],
)
def test_mrope_matches_hf_apply_multimodal_rotary_pos_emb(head_dim, sections, expected):
    """Batched (t, h, w) positions, fractional ones included: the encoder equals HF's computation literally."""
    torch.manual_seed(0)
    enc = build_encoder("mrope", dim=2 * head_dim, num_heads=2, sections=sections)
    assert enc.sections == expected
    coords = torch.stack((video_coords(3, 2, 4), video_coords(3, 2, 4) * 1.5 + 0.25))  # [2, 24, 3]
    q = torch.randn(2, 2, coords.shape[1], head_dim)
    cos, sin = hf_cos_sin(coords.permute(2, 0, 1), head_dim, 10000.0)  # position_ids [3, B, L]
    golden = hf_apply_multimodal_rotary_pos_emb(q.double(), cos, sin, expected).float()
    torch.testing.assert_close(enc.rotate(q, coords), golden, atol=2e-5, rtol=0)
    torch.testing.assert_close(enc.rotate(q, Positions(coords3d=coords)), golden, atol=2e-5, rtol=0)
    torch.testing.assert_close(enc.rotate(q[:1], coords[0]), golden[:1], atol=2e-5, rtol=0)  # plain [L, 3]


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_mrope_text_positions_are_plain_1d_rope(layout):
    """Qwen2-VL §2.1: with t = h = w = p, M-RoPE is 1D RoPE at p (RoFormer eq. 34, θ_k = 10000^(−2k/Dh))."""
    torch.manual_seed(0)
    head_dim, steps = 16, torch.tensor([0.0, 1.0, 5.0, 37.0])
    enc = build_encoder("mrope", dim=32, num_heads=2, layout=layout)
    q = torch.randn(1, 2, 4, head_dim)
    out = enc.rotate(q, steps[:, None].expand(-1, 3)).double()
    theta = steps.double()[:, None] * 10000.0 ** (-torch.arange(8, dtype=torch.float64) * 2 / head_dim)
    cos, sin = theta.cos(), theta.sin()
    qd = q.double()
    a, b = (qd[..., :8], qd[..., 8:]) if layout == "half" else (qd[..., 0::2], qd[..., 1::2])
    first, second = a * cos - b * sin, a * sin + b * cos
    golden = torch.cat((first, second), -1) if layout == "half" else torch.stack((first, second), -1).flatten(-2)
    torch.testing.assert_close(out, golden, atol=1e-5, rtol=0)
    rope = build_encoder("rope", dim=32, num_heads=2, layout=layout)
    torch.testing.assert_close(enc.rotate(q, steps[:, None].expand(-1, 3)), rope.rotate(q, steps), atol=1e-5, rtol=0)


def test_mrope_sections_rotate_with_t_then_row_then_col():
    """Moving one axis turns only that section's pairs (here [2, 3, 3] at Dh 16, in ladder order)."""
    enc = build_encoder("mrope", dim=32, num_heads=2)
    base = enc.angles(torch.tensor([[1.0, 2.0, 3.0]]))[0]
    for axis, pairs in ((0, range(0, 2)), (1, range(2, 5)), (2, range(5, 8))):
        moved = torch.tensor([[1.0, 2.0, 3.0]])
        moved[0, axis] += 1
        changed = (enc.angles(moved)[0] - base).abs() > 1e-6
        assert changed.nonzero().flatten().tolist() == list(pairs), axis


def test_mrope_sections_must_sum_to_half_the_head_dim():
    with pytest.raises(ConfigError, match=r"sections=\[4, 4, 4\] must be three pair counts .* = 8"):
        build_encoder("mrope", dim=32, num_heads=2, sections=[4, 4, 4])
    with pytest.raises(ConfigError, match="three pair counts"):
        build_encoder("mrope", dim=32, num_heads=2, sections=[4, 4])


def test_mrope_head_dim_too_small_is_one_line():
    with pytest.raises(ConfigError, match="mrope needs a head dim of at least 6") as info:
        build_encoder("mrope", dim=8, num_heads=2)  # head dim 4: 2 pairs for 3 axes
    assert "\n" not in str(info.value)


# -- videorope ----------------------------------------------------------------------------
def test_videorope_matches_the_official_code():
    """Reference ``get_t_scale_rope_index`` (δ = scale_factor = 2, centring (H−1)//2) with
    ``apply_m_modify_multimodal_rotary_pos_emb`` at mrope_section [2, 3, 3] (Dh 16), batched and plain."""
    torch.manual_seed(0)
    frames, rows, cols, head_dim = 3, 4, 5, 16
    enc = build_encoder("videorope", dim=32, num_heads=2, grid_size=(rows, cols))
    coords = video_coords(frames, rows, cols)
    q = torch.randn(2, 2, coords.shape[0], head_dim)
    ids = videorope_position_ids(frames, rows, cols, scale_factor=2.0)  # [3, L]
    cos, sin = hf_cos_sin(ids[:, None].expand(-1, 2, -1), head_dim, 10000.0)
    golden = videorope_reference(q.double(), cos, sin, [2, 3, 3]).float()
    torch.testing.assert_close(enc.rotate(q, coords), golden, atol=2e-5, rtol=0)
    torch.testing.assert_close(enc.rotate(q, coords.expand(2, -1, -1)), golden, atol=2e-5, rtol=0)
    torch.testing.assert_close(enc.rotate(q, Positions(coords3d=coords)), golden, atol=2e-5, rtol=0)


def test_videorope_golden_angles_at_head_dim_16():
    """Dh 16: pairs 0..5 alternate row, col (row first), pairs 6, 7 follow time; θ_k = 10000^(−k/8).

    (t, row, col) = (3, 2, 5) in a 4×6 frame, δ = 2: positions (δt, δt + row − (4−1)//2, δt + col − (6−1)//2)
    = (6, 7, 9). Half layout: a unit vector (1 in the first half, 0 in the second) turns into (cos θ, sin θ).
    """
    enc = build_encoder("videorope", dim=32, num_heads=2, grid_size=(4, 6))
    theta = [10000.0 ** (-k / 8) for k in range(8)]
    which = [7, 9, 7, 9, 7, 9, 6, 6]  # row, col, row, col, row, col, t, t
    angles = torch.tensor([p * f for p, f in zip(which, theta, strict=True)], dtype=torch.float64)
    x = torch.cat((torch.ones(8), torch.zeros(8))).expand(1, 2, 1, 16)
    out = enc.rotate(x, torch.tensor([[3.0, 2.0, 5.0]]))[0, :, 0].double()
    torch.testing.assert_close(out[:, :8], angles.cos().expand(2, -1), atol=1e-6, rtol=0)
    torch.testing.assert_close(out[:, 8:], angles.sin().expand(2, -1), atol=1e-6, rtol=0)


def test_videorope_time_gets_the_lowest_frequencies():
    """LTA: every temporal pair is slower than every spatial one; the ladder is 1D RoPE's."""
    enc = build_encoder("videorope", dim=256, num_heads=2)  # Dh 128: Qwen2-VL's 16 temporal pairs of 64
    ladder = 1.0 / 10000.0 ** (torch.arange(0, 128, 2, dtype=torch.float64) / 128)
    torch.testing.assert_close(enc.inv_freq, ladder)
    # one frame on (δ = 2) with row, col − 2: back at the same spatial positions, so only time pairs move
    moved = enc.angles(torch.tensor([[1.0, -2.0, -2.0]])) - enc.angles(torch.tensor([[0.0, 0.0, 0.0]]))
    temporal = (moved[0].abs() > 1e-9).nonzero().flatten()
    assert temporal.tolist() == list(range(48, 64))
    assert ladder[48:].max() < ladder[:48].min()


def test_videorope_without_grid_centres_nothing_and_delta_scales_time():
    enc = build_encoder("videorope", dim=32, num_heads=2, temporal_spacing=1.5)
    theta = torch.tensor([10000.0 ** (-k / 8) for k in range(8)], dtype=torch.float64)
    pos = torch.tensor([1.5 * 2, 1.5 * 2 + 1, 1.5 * 2 + 3], dtype=torch.float64)  # (t, row, col) = (2, 1, 3)
    expected = torch.stack([pos[a] for a in (1, 2, 1, 2, 1, 2, 0, 0)]) * theta
    torch.testing.assert_close(enc.angles(torch.tensor([[2.0, 1.0, 3.0]]))[0].double(), expected, atol=1e-6, rtol=0)


def test_videorope_options_are_checked():
    with pytest.raises(ConfigError, match="temporal_pairs <= head_dim/2 - 2 = 6"):
        build_encoder("videorope", dim=32, num_heads=2, temporal_pairs=7)
    with pytest.raises(ConfigError, match="videorope needs 1 <= temporal_pairs") as info:
        build_encoder("videorope", dim=8, num_heads=2)  # head dim 4: 2 pairs for 3 axes
    assert "\n" not in str(info.value)
    with pytest.raises(ConfigError, match=r"grid_size must be \(rows, cols\) or \(frames, rows, cols\), got \(4,\)"):
        build_encoder("videorope", dim=32, num_heads=2, grid_size=(4,))
    with pytest.raises(ConfigError, match=r"videorope: temporal_spacing must be > 0, got 0.0"):
        build_encoder("videorope", dim=32, num_heads=2, temporal_spacing=0.0)


def test_videorope_takes_rows_and_cols_of_a_3d_grid():
    assert build_encoder("videorope", dim=32, num_heads=2, grid_size=(8, 4, 6)).grid_size == (4, 6)


# -- both ---------------------------------------------------------------------------------
BOTH = [("mrope", {}), ("videorope", {"grid_size": (4, 4)}), ("videorope", {})]


@pytest.mark.parametrize(("name", "options"), BOTH)
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_scores_depend_only_on_the_3d_offset(name, options, layout):
    torch.manual_seed(0)
    enc = build_encoder(name, dim=32, num_heads=2, layout=layout, **options)
    q, k = torch.randn(1, 2, 1, 16), torch.randn(1, 2, 1, 16)
    a, b = torch.tensor([[1.0, 2.0, 0.0]]), torch.tensor([[3.0, 0.0, 1.0]])
    base = scores(enc, q, k, a, b)
    for shift in ([5.0, 7.0, -2.0], [-1.0, 3.0, 4.0], [0.5, 2.25, -0.75]):
        s = torch.tensor([shift])
        torch.testing.assert_close(scores(enc, q, k, a + s, b + s), base, atol=1e-4, rtol=0)
    for other in ([[3.0, 1.0, 0.0]], [[1.0, 0.0, 1.0]], [[3.0, 0.0, 2.0]]):  # row <-> col, t changed, col changed
        assert not torch.allclose(scores(enc, q, k, a, torch.tensor(other)), base, atol=1e-3)


@pytest.mark.parametrize(("name", "options"), BOTH)
def test_rotation_keeps_norms_in_every_input_form(name, options):
    torch.manual_seed(0)
    enc = build_encoder(name, dim=32, num_heads=2, **options)
    coords = video_coords(2, 3, 3)
    q = torch.randn(2, 2, coords.shape[0], 16)
    out = enc.rotate(q, Positions(coords3d=coords))
    torch.testing.assert_close(out.norm(dim=-1), q.norm(dim=-1), rtol=1e-5, atol=1e-5)
    assert not torch.allclose(out, q)
    torch.testing.assert_close(enc.rotate(q, coords), out)
    torch.testing.assert_close(enc.rotate(q, coords.expand(2, -1, -1)), out)


@pytest.mark.parametrize("name", ["mrope", "videorope"])
def test_missing_or_malformed_positions_are_clear_errors(name):
    enc = build_encoder(name, dim=32, num_heads=2)
    with pytest.raises(PoslabError, match="reads positions.coords3d, but the data provides only steps"):
        enc.rotate(torch.zeros(1, 2, 4, 16), Positions(steps=torch.arange(4)))
    with pytest.raises(ValueError, match=r"trailing \(t, row, col\) axis"):
        enc.rotate(torch.zeros(1, 2, 4, 16), torch.zeros(4, 2))


@pytest.mark.parametrize("name", ["mrope", "videorope"])
def test_a_transformer_sees_the_token_order(name):
    """With random weights, permuting the patches does not just permute the outputs (cf. test_registry)."""
    from poslab.nn import Transformer

    torch.manual_seed(0)
    enc = build_encoder(name, dim=32, num_heads=2)
    model = Transformer(enc, dim=32, depth=1, num_heads=2).eval()
    coords = video_coords(2, 3, 3)
    x, perm = torch.randn(1, coords.shape[0], 32), torch.randperm(coords.shape[0])
    with torch.no_grad():
        gap = (model(x[:, perm], Positions(coords3d=coords)) - model(x, Positions(coords3d=coords))[:, perm]).abs()
    assert gap.max() > 1e-3
    assert math.isfinite(gap.max().item())


def hf_interleaved_angles(coords: torch.Tensor, inv_freq: torch.Tensor, section: list[int]) -> torch.Tensor:
    """HF ``apply_interleaved_mrope`` (Qwen3-VL) literally: the frame index's angles for every pair, then the
    row's written into ``slice(1, 3h, 3)`` and the column's into ``slice(2, 3w, 3)``."""
    freqs = coords.double().T[:, :, None] * inv_freq  # [3, L, P]: t, row, col
    out = freqs[0].clone()
    for axis, offset in ((1, 1), (2, 2)):
        idx = slice(offset, section[axis] * 3, 3)
        out[..., idx] = freqs[axis, ..., idx]
    return out


@pytest.mark.parametrize(("dim", "heads", "sections"), [(256, 2, None), (32, 2, None), (32, 2, [3, 3, 2])])
def test_interleaved_mrope_is_qwen3vls_assignment(dim, heads, sections):
    """Qwen3-VL's [24, 20, 20] at 64 pairs (its own), the 8-pair default [4, 2, 2], and other sections."""
    enc = build_encoder("mrope", dim=dim, num_heads=heads, interleaved=True, sections=sections, base=100.0)
    pairs = dim // heads // 2
    expected_sections = sections or [pairs - 2 * (5 * pairs // 16), 5 * pairs // 16, 5 * pairs // 16]
    assert enc.sections == expected_sections
    coords = torch.tensor([[t, r, c] for t in range(3) for r in range(2) for c in range(4)], dtype=torch.float32)
    inv_freq = 1.0 / 100.0 ** (torch.arange(0, 2 * pairs, 2, dtype=torch.float64) / (2 * pairs))
    golden = torch.remainder(hf_interleaved_angles(coords, inv_freq, expected_sections), 2 * math.pi).float()
    torch.testing.assert_close(enc.angles(coords), golden, rtol=1e-6, atol=1e-6)
    if dim == 256:
        assert enc.sections == [24, 20, 20]


def test_interleaved_mrope_gives_the_column_high_frequencies_and_text_tokens_stay_1d_rope():
    """Chunked M-RoPE gives the column only the lowest frequencies; interleaved gives it the second-highest too.
    A text token (t = h = w = p) is 1D RoPE at p either way."""
    chunked = build_encoder("mrope", dim=32, num_heads=2)
    interleaved = build_encoder("mrope", dim=32, num_heads=2, interleaved=True)
    assert chunked.axis_of_pair.tolist().index(2) == 5 and interleaved.axis_of_pair.tolist().index(2) == 2
    rope = build_encoder("rope", dim=32, num_heads=2)
    x = torch.randn(1, 2, 6, 16)
    text = torch.arange(6, dtype=torch.float32)[:, None].expand(6, 3)
    torch.testing.assert_close(interleaved.rotate(x, text), rope.rotate(x, torch.arange(6)), rtol=1e-5, atol=1e-5)


def test_sections_that_do_not_interleave_are_refused():
    with pytest.raises(ConfigError, match="do not fit interleaved over 8 pairs"):
        build_encoder("mrope", dim=32, num_heads=2, interleaved=True, sections=[1, 3, 4])
