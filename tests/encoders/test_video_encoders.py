"""The 3D (video) encoders against their papers: golden values and properties."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from poslab.encoders import build_encoder, build_encoder_in_context, encoder_defaults
from poslab.errors import ConfigError, PoslabError
from poslab.positions import Positions

VIDEO = ("sincos3d", "learned3d", "rope3d")


def cells(frames: int, rows: int, cols: int) -> torch.Tensor:
    """Integer (t, row, col) of a clip's patches, t-major then row-major: ``[frames * rows * cols, 3]``."""
    return torch.tensor(
        [[t, r, c] for t in range(frames) for r in range(rows) for c in range(cols)], dtype=torch.float32
    )


def rescaled(new: tuple[int, int, int], old: tuple[int, int, int]) -> torch.Tensor:
    """Patch centres of a ``new`` clip in units of the ``old`` one, per axis ``(i + 0.5) · old / new − 0.5``."""
    return (cells(*new) + 0.5) * torch.tensor([o / n for o, n in zip(old, new, strict=True)]) - 0.5


def coords_of(*triples) -> torch.Tensor:
    return torch.tensor(triples, dtype=torch.float32)


def build(name: str, dim: int = 32, num_heads: int = 2, **options):
    """With the context a 3-frame 4x4 clip gives (what the video data module's context_options supply)."""
    return build_encoder_in_context(
        name,
        dim=dim,
        num_heads=num_heads,
        options={**encoder_defaults(name), **options},
        context={"grid_size": (4, 4), "frames": 3},
    )


@pytest.mark.parametrize("name", VIDEO)
def test_positions_plain_and_batched_give_the_same_result(name):
    """``Positions(coords3d=...)``, a plain ``[L, 3]`` tensor and a batched ``[B, L, 3]`` one agree."""
    torch.manual_seed(0)
    enc = build(name)
    coords = cells(3, 4, 4)
    other = coords.flip(0)
    x, q = torch.randn(2, 48, 32), torch.randn(2, 2, 48, 16)
    for hook, inp in (("encode_input", x), ("rotate", q)):
        hook = getattr(enc, hook)
        plain = hook(inp, coords)
        torch.testing.assert_close(hook(inp, Positions(coords3d=coords)), plain)
        torch.testing.assert_close(hook(inp, Positions(coords3d=coords, coords3d_grid=(3, 4, 4))), plain)
        batched = hook(inp, torch.stack((coords, other)))
        assert batched.shape == inp.shape
        torch.testing.assert_close(batched[0], plain[0])
        torch.testing.assert_close(batched[1], hook(inp, other)[1])
    assert enc.reads == "coords3d"


# -- sincos3d ---------------------------------------------------------------------------
def sincos_golden(t: float, row: float, col: float, dim: int, temp: float = 1e4) -> list[float]:
    """Video MAE's layout written out: [t | col | row] with D/4, 3D/8, 3D/8 channels; each part of d channels is
    [sin(p·ω_0..), cos(p·ω_0..)] with ω_k = 1 / T^(k / (d/2))."""
    out = []
    for p, d in ((t, dim // 4), (col, 3 * dim // 8), (row, 3 * dim // 8)):
        omegas = [temp ** (-k / (d // 2)) for k in range(d // 2)]
        out += [math.sin(p * w) for w in omegas] + [math.cos(p * w) for w in omegas]
    return out


def test_sincos3d_golden_values_video_mae_order():
    """dim 16 at (t 1, row 2, col 3): [sin 1, sin .01, cos 1, cos .01 | col 3, ω = 1, 10^(-4/3), 10^(-8/3) | row 2]."""
    enc = build_encoder("sincos3d", dim=16, num_heads=2)
    out = enc.encode_input(torch.zeros(1, 1, 16), coords_of((1, 2, 3)))[0, 0]
    torch.testing.assert_close(out[:4], torch.tensor([0.841471, 0.010000, 0.540302, 0.999950]), atol=1e-6, rtol=0)
    torch.testing.assert_close(out, torch.tensor(sincos_golden(1, 2, 3, 16)), atol=1e-6, rtol=0)


def test_sincos3d_fractional_positions_follow_the_formula():
    enc = build_encoder("sincos3d", dim=32, num_heads=2)
    coords = coords_of((0.25, 1.5, -0.375), (2.75, 0.125, 3.5))
    expected = torch.tensor([sincos_golden(*p, dim=32) for p in coords.tolist()])
    torch.testing.assert_close(enc.table(coords), expected, atol=1e-6, rtol=0)


def test_sincos3d_each_axis_owns_its_channels():
    """t moves only the first D/4 channels, col only the next 3D/8, row only the last 3D/8."""
    enc = build_encoder("sincos3d", dim=32, num_heads=2)
    parts = {0: slice(0, 8), 2: slice(8, 20), 1: slice(20, 32)}  # coordinate index (t, row, col) -> its channels
    base = coords_of((1, 2, 3))
    for axis, own in parts.items():
        moved = base.clone()
        moved[0, axis] += 1.5
        diff = (enc.table(moved) - enc.table(base))[0].abs()
        assert diff[own].max() > 1e-3, axis
        mask = torch.ones(32, dtype=torch.bool)
        mask[own] = False
        assert diff[mask].max() == 0, axis


def test_sincos3d_equals_the_reference_table_over_a_clip():
    """torchmultimodal's get_3d_sin_cos_embeddings (FAIR video MAE) rebuilt: temporal rows repeated over the
    h·w patches, spatial MAE rows (meshgrid(w, h): column half first) repeated over the frames, concatenated."""
    T, H, W, dim = 2, 3, 4, 32

    def one_d(d, pos):
        omega = 1.0 / 10000 ** (torch.arange(d // 2, dtype=torch.float64) / (d / 2.0))
        out = pos.double()[:, None] * omega
        return torch.cat((out.sin(), out.cos()), dim=1)

    grid_w, grid_h = torch.meshgrid(torch.arange(W), torch.arange(H), indexing="xy")  # [H, W] each
    spatial = torch.cat((one_d(3 * dim // 8, grid_w.flatten()), one_d(3 * dim // 8, grid_h.flatten())), dim=1)
    temporal = one_d(dim // 4, torch.arange(T))
    temporal = temporal[:, None].expand(T, H * W, -1)  # [T, H*W, D/4]
    spatial = spatial[None].expand(T, -1, -1)  # [T, H*W, 3D/4]
    reference = torch.cat((temporal, spatial), dim=-1).reshape(-1, dim)
    enc = build_encoder("sincos3d", dim=dim, num_heads=2)
    torch.testing.assert_close(enc.table(cells(T, H, W)), reference.float(), atol=1e-6, rtol=0)


@pytest.mark.parametrize("dim", [8, 24, 36])
def test_sincos3d_needs_dim_divisible_by_16(dim):
    with pytest.raises(ConfigError, match="divisible by 16"):
        build_encoder("sincos3d", dim=dim, num_heads=2)


# -- learned3d --------------------------------------------------------------------------
def randomised(enc):
    with torch.no_grad():
        for p in enc.parameters():
            p.normal_()
    return enc


def test_learned3d_takes_frames_and_grid_from_the_data_context():
    enc = build("learned3d")
    assert enc.frames == 3 and enc.grid_size == (4, 4)
    assert enc.time_table.shape == (3, 32) and enc.space_table.shape == (4, 4, 32)


@pytest.mark.parametrize(("option", "given"), [("frames", {"grid_size": (4, 4)}), ("grid_size", {"frames": 3})])
def test_learned3d_missing_size_names_the_option(option, given):
    with pytest.raises(PoslabError, match=f"learned3d needs encoder.{option}"):
        build_encoder("learned3d", dim=32, num_heads=2, **given)


def test_learned3d_integer_cells_index_the_tables_exactly():
    enc = randomised(build_encoder("learned3d", dim=8, num_heads=2, grid_size=(3, 4), frames=2))
    coords = coords_of((0, 0, 0), (1, 2, 1), (0, 1, 3), (1, 0, 2))
    expected = torch.stack([enc.time_table[t] + enc.space_table[r, c] for t, r, c in coords.long().tolist()])
    assert torch.equal(enc.lookup(coords), expected)
    assert torch.equal(enc.lookup(coords, grid=(2, 3, 4)), expected)  # the data's fact, tensor unread


def test_learned3d_time_lookup_is_linear_with_half_pixel_centres():
    """2 -> 4 frames samples t = −0.25, 0.25, 0.75, 1.25, clamped to [0, 1]: rows a, ¾a + ¼b, ¼a + ¾b, b —
    which is what F.interpolate(mode="linear", align_corners=False) gives too."""
    enc = randomised(build_encoder("learned3d", dim=8, num_heads=2, grid_size=(1, 1), frames=2))
    a, b = enc.time_table.detach()
    golden = torch.stack((a, 0.75 * a + 0.25 * b, 0.25 * a + 0.75 * b, b))
    coords = rescaled((4, 1, 1), (2, 1, 1))
    looked_up = enc.lookup(coords).detach() - enc.space_table.detach()[0, 0]
    torch.testing.assert_close(looked_up, golden, atol=1e-6, rtol=0)
    resized = F.interpolate(enc.time_table.detach().t()[None], size=4, mode="linear", align_corners=False)[0].t()
    torch.testing.assert_close(resized, golden, atol=1e-6, rtol=0)


@pytest.mark.parametrize(
    ("old", "new"), [((3, 3, 3), (5, 5, 5)), ((4, 4, 4), (2, 6, 3)), ((2, 3, 4), (7, 5, 2)), ((6, 4, 4), (4, 4, 4))]
)
def test_learned3d_at_rescaled_coords_equals_resampling_both_tables(old, new):
    """Fractional (rescaled) coordinates = resizing the time table with F.interpolate linear and the 2D table with
    F.interpolate bicubic (align_corners=False, no antialias), then summing per patch."""
    torch.manual_seed(0)
    enc = randomised(build_encoder("learned3d", dim=8, num_heads=2, grid_size=old[1:], frames=old[0]))
    time = enc.time_table.detach()
    space = enc.space_table.detach()
    time_new = F.interpolate(time.t()[None], size=new[0], mode="linear", align_corners=False)[0].t()
    space_new = F.interpolate(space.permute(2, 0, 1)[None], size=new[1:], mode="bicubic", align_corners=False)
    space_new = space_new[0].permute(1, 2, 0)
    expected = (time_new[:, None, None] + space_new[None]).reshape(-1, 8)
    torch.testing.assert_close(enc.lookup(rescaled(new, old)).detach(), expected, atol=1e-5, rtol=1e-5)


def test_learned3d_raw_coords_past_the_tables_are_a_one_line_error():
    enc = build_encoder("learned3d", dim=8, num_heads=2, grid_size=(4, 4), frames=3)
    for coords, grid in ((cells(6, 4, 4), None), (cells(3, 5, 4), None), (cells(6, 4, 4), (6, 4, 4))):
        with pytest.raises(PoslabError, match="tables are 3 frames x 4x4; evaluate with data.coords=rescaled") as e:
            enc.encode_input(torch.zeros(1, len(coords), 8), Positions(coords3d=coords, coords3d_grid=grid))
        assert "\n" not in str(e.value)


def test_learned3d_tables_learn_at_fractional_coords():
    enc = build_encoder("learned3d", dim=8, num_heads=2, grid_size=(3, 3), frames=3)
    out = enc.encode_input(torch.zeros(1, 2, 8), coords_of((0.5, 1.25, 0.75), (1.5, 0.5, 2.0)))
    (out * torch.randn_like(out)).sum().backward()
    assert enc.time_table.grad.abs().sum() > 0 and enc.space_table.grad.abs().sum() > 0


# -- rope3d -----------------------------------------------------------------------------
def scores(enc, q, k, pos_q, pos_k):
    return (enc.rotate(q, pos_q) * enc.rotate(k, pos_k)).sum(-1)


@pytest.mark.parametrize(
    ("head_dim", "sections"), [(16, (4, 2, 2)), (32, (6, 5, 5)), (64, (12, 10, 10)), (6, (1, 1, 1))]
)
def test_rope3d_default_split_is_even_with_the_remainder_to_t(head_dim, sections):
    assert build_encoder("rope3d", dim=2 * head_dim, num_heads=2).sections == sections


def test_rope3d_turns_each_pair_by_its_axis_position_times_its_frequency():
    """Sections (t, row, col) = (3, 2, 3) of 8 pairs, interleaved: pair j of axis a (n_a pairs, position p_a) turns
    by p_a / 100^(2j / (2 n_a)); unit pairs (1, 0) come out as (cos θ, sin θ)."""
    enc = build_encoder("rope3d", dim=32, num_heads=2, sections=[3, 2, 3])
    coords = coords_of((1, 2, 3), (4.5, 0.25, 7))
    x = torch.tensor([1.0, 0.0]).repeat(8).expand(1, 2, 2, 16)
    out = enc.rotate(x, coords).double()[0]
    for i, (t, row, col) in enumerate(coords.tolist()):
        theta = [p / 100.0 ** (2 * j / (2 * n)) for p, n in ((t, 3), (row, 2), (col, 3)) for j in range(n)]
        theta = torch.tensor(theta, dtype=torch.float64)
        torch.testing.assert_close(out[:, i, 0::2], theta.cos().expand(2, 8), atol=1e-6, rtol=0)
        torch.testing.assert_close(out[:, i, 1::2], theta.sin().expand(2, 8), atol=1e-6, rtol=0)


@pytest.mark.parametrize("layout", ["interleaved", "half"])
@pytest.mark.parametrize("sections", [None, [2, 4, 2]])
def test_rope3d_scores_depend_only_on_the_3d_offset(layout, sections):
    torch.manual_seed(0)
    enc = build_encoder("rope3d", dim=32, num_heads=2, layout=layout, sections=sections)
    q, k = torch.randn(1, 2, 1, 16), torch.randn(1, 2, 1, 16)
    pq, pk = coords_of((1, 2, 3)), coords_of((4, 0, 1))
    base = scores(enc, q, k, pq, pk)
    for shift in [(5, 7, 2), (-1, 3, -4), (0.5, 2.25, -1.75)]:
        s = torch.tensor(shift)
        torch.testing.assert_close(scores(enc, q, k, pq + s, pk + s), base, atol=1e-4, rtol=0)
    for other in [(4, 0, 2), (4, 1, 1), (5, 0, 1)]:  # one axis of the offset changed at a time
        assert not torch.allclose(scores(enc, q, k, pq, coords_of(other)), base, atol=1e-3), other


def test_rope3d_keeps_norms_and_tells_the_axes_apart():
    """A rotation keeps each vector's norm; (t, row) = (1, 3) and (3, 1) are different places, so swapping the
    t and row columns of the positions changes the output (the axes have their own pairs)."""
    torch.manual_seed(0)
    enc = build("rope3d")
    q = torch.randn(2, 2, 48, 16)
    coords = cells(3, 4, 4)
    out = enc.rotate(q, coords)
    torch.testing.assert_close(out.norm(dim=-1), q.norm(dim=-1), rtol=1e-5, atol=1e-5)
    assert not torch.allclose(out, q)
    swapped = enc.rotate(q, coords[:, [1, 0, 2]])
    moved = (coords[:, 0] != coords[:, 1]).nonzero().squeeze(1)
    assert (swapped - out)[..., moved, :].abs().amax(dim=-1).min() > 1e-4  # every patch with t != row moves


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"sections": [4, 4]}, "three positive"),
        ({"sections": [4, 4, 1]}, "summing to head_dim/2 = 8"),
        ({"sections": [0, 4, 4]}, "three positive"),
        ({"layout": "halves"}, "layout expects one of 'interleaved', 'half', got 'halves' .did you mean 'half'.."),
    ],
)
def test_rope3d_bad_options_are_a_config_error(options, match):
    with pytest.raises(ConfigError, match=match):
        build_encoder("rope3d", dim=32, num_heads=2, **options)


def test_rope3d_needs_a_pair_per_axis():
    with pytest.raises(ConfigError, match="at least 6"):
        build_encoder("rope3d", dim=8, num_heads=2)
