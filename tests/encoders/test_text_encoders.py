"""The 1D encoders against their papers: golden values and math properties."""

from __future__ import annotations

import math

import pytest
import torch

from poslab.encoders import available_encoders, build_encoder, encoder_class
from poslab.encoders.alibi import alibi_slopes
from poslab.encoders.learned import PositionOutOfRange
from poslab.encoders.rope_scaling import RopeScaling, default_inv_freq, scaled_frequencies, yarn_attention_factor
from poslab.encoders.rotary import apply_rotary
from poslab.encoders.t5 import t5_buckets


# -- sinusoidal ------------------------------------------------------------------------------
def test_sinusoidal_golden_values():
    """Vaswani et al.: dim 4, positions 0..3 (the project's golden values, rounded to 3 places)."""
    enc = build_encoder("sinusoidal", dim=4, num_heads=1)
    out = enc.encode_input(torch.zeros(1, 4, 4), torch.arange(4))[0]
    golden = torch.tensor(
        [
            [0.000, 1.000, 0.000, 1.000],
            [0.841, 0.540, 0.010, 1.000],
            [0.909, -0.416, 0.020, 1.000],
            [0.141, -0.990, 0.030, 1.000],
        ]
    )
    torch.testing.assert_close(out, golden, atol=5e-4, rtol=0)


# -- learned ---------------------------------------------------------------------------------
def test_learned_rows_and_the_over_length_error():
    enc = build_encoder("learned", dim=8, num_heads=2, max_len=16)
    out = enc.encode_input(torch.zeros(1, 3, 8), torch.tensor([0, 5, 15]))
    torch.testing.assert_close(out[0], enc.table.weight[[0, 5, 15]])
    with pytest.raises(PositionOutOfRange, match="position 16 is past encoder.max_len=16"):
        enc.encode_input(torch.zeros(1, 17, 8), torch.arange(17))


# -- RoPE --------------------------------------------------------------------------------------
def rope(**options):
    return build_encoder("rope", dim=32, num_heads=2, max_len=64, **options)


def score(enc, q, k, m, n):
    return (enc.rotate(q, torch.tensor([m])) * enc.rotate(k, torch.tensor([n]))).sum(-1)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_rope_scores_depend_only_on_the_offset(layout):
    torch.manual_seed(0)
    enc = rope(layout=layout)
    q, k = torch.randn(1, 2, 1, 16), torch.randn(1, 2, 1, 16)
    for offset in (0, 1, 7, 50):
        values = torch.stack([score(enc, q, k, m + offset, m) for m in (0, 3, 100, 5000)])
        torch.testing.assert_close(values, values[:1].expand_as(values), atol=1e-4, rtol=0)
    assert not torch.allclose(score(enc, q, k, 1, 0), score(enc, q, k, 9, 0), atol=1e-3)


def test_interleaved_rope_is_the_complex_form():
    """RoFormer eq. 34: (q_{2i} + i q_{2i+1}) · exp(i m θ_i)."""
    enc = rope(layout="interleaved")
    x = torch.randn(1, 1, 5, 16, dtype=torch.float64)
    m = torch.arange(5)
    theta = default_inv_freq(10000.0, 16)
    rotation = torch.polar(torch.ones(5, 8, dtype=torch.float64), m[:, None].double() * theta)
    expected = torch.view_as_real(torch.view_as_complex(x.view(1, 1, 5, 8, 2).contiguous()) * rotation).reshape(
        1, 1, 5, 16
    )
    torch.testing.assert_close(enc.rotate(x.float(), m).double(), expected, atol=1e-5, rtol=0)


def test_half_rope_is_the_interleaved_form_on_permuted_channels():
    """Pairs (j, j + R) of the half layout are the pairs (2j, 2j + 1) after a channel permutation."""
    x = torch.randn(1, 2, 6, 16)
    perm = torch.stack((torch.arange(8), torch.arange(8) + 8), dim=-1).flatten()  # 0, 8, 1, 9, ...
    half = rope(layout="half").rotate(x, torch.arange(6))
    interleaved = rope(layout="interleaved").rotate(x[..., perm], torch.arange(6))
    torch.testing.assert_close(half[..., perm], interleaved)


def test_rope_cos_sin_are_exact_at_position_100000():
    """Half layout: rotating (1, …, 1 | 0, …, 0) gives (cos θ | sin θ); float32 angles would be off by ~1e-2."""
    enc = rope()
    x = torch.cat((torch.ones(8), torch.zeros(8))).view(1, 1, 1, 16)
    out = enc.rotate(x, torch.tensor([100_000]))[0, 0, 0].double()
    angles = 100_000 * 10000.0 ** (-torch.arange(0, 16, 2, dtype=torch.float64) / 16)  # RoFormer eq. 15
    assert (out[:8] - torch.cos(angles)).abs().max() < 1e-4
    assert (out[8:] - torch.sin(angles)).abs().max() < 1e-4


def test_rope_partial_rotary_keeps_the_other_channels():
    enc = rope(rotary_fraction=0.25)  # head dim 16 -> 4 rotated channels
    x = torch.randn(1, 2, 5, 16)
    out = enc.rotate(x, torch.arange(5))
    torch.testing.assert_close(out[..., 4:], x[..., 4:])
    assert not torch.allclose(out[..., :4], x[..., :4])


def test_linear_scaling_is_positions_divided_by_s():
    x = torch.randn(1, 2, 4, 16)
    scaled = rope(scaling={"type": "linear", "factor": 4.0}).rotate(x, torch.tensor([0, 4, 8, 100]))
    plain = rope().rotate(x, torch.tensor([0.0, 1.0, 2.0, 25.0]))
    torch.testing.assert_close(scaled, plain, atol=1e-5, rtol=0)


def test_ntk_and_dynamic_rescale_the_base():
    s, d = 4.0, 16
    inv, factor = scaled_frequencies(RopeScaling("ntk", s), base=10000.0, dim=d, original_max_len=64)
    torch.testing.assert_close(inv, default_inv_freq(10000.0 * s ** (d / (d - 2)), d))
    assert factor == 1.0
    dynamic = RopeScaling("dynamic", 1.0)
    below, _ = scaled_frequencies(dynamic, base=10000.0, dim=d, original_max_len=64, seq_len=32)
    torch.testing.assert_close(below, default_inv_freq(10000.0, d))  # unchanged within the original context
    above, _ = scaled_frequencies(dynamic, base=10000.0, dim=d, original_max_len=64, seq_len=256)
    torch.testing.assert_close(above, default_inv_freq(10000.0 * 4.0 ** (d / (d - 2)), d))  # NTK with s = 256/64


def yarn_reference(s: float, dim: int, context: int, base: float = 10000.0, alpha: float = 1.0, beta: float = 32.0):
    """YaRN (Peng et al. 2023, §3.2, "NTK-by-parts", eqs. 17-19) for one head's ``dim`` rotated channels.

    θ_d = base^(−2d/|D|), wavelength λ_d = 2π/θ_d, rotations over the original
    context r(d) = L/λ_d; h(θ_d) = (1 − γ)·θ_d/s + γ·θ_d: dimensions with r > β
    (many rotations: high frequency) keep θ_d (γ = 1), those with r < α are fully
    interpolated to θ_d/s (γ = 0). Between, the paper writes γ = (r − α)/(β − α);
    its reference code (jquesnelle/yarn ``find_correction_range`` +
    ``linear_ramp_mask``, as Hugging Face) ramps linearly in the index d instead,
    from floor(d(β)) to ceil(d(α)), d(r) = |D|·ln(L/(2πr)) / (2·ln base): that is
    the form checked here. Returns (h(θ_d) float64, γ, r).
    """
    d = torch.arange(dim // 2, dtype=torch.float64)
    theta = base ** (-2 * d / dim)
    rotations = context / (2 * math.pi / theta)

    def index_of(r):
        return dim * math.log(context / (2 * math.pi * r)) / (2 * math.log(base))

    first, last = math.floor(index_of(beta)), math.ceil(index_of(alpha))
    gamma = 1 - ((d - first) / (last - first)).clamp(0, 1)
    gamma = torch.where(rotations > beta, 1.0, torch.where(rotations < alpha, 0.0, gamma))
    return (1 - gamma) * theta / s + gamma * theta, gamma, rotations


def test_yarn_frequencies_follow_the_paper_per_dimension():
    s, d, context = 8.0, 16, 2048
    inv, factor = scaled_frequencies(RopeScaling("yarn", s), base=10000.0, dim=d, original_max_len=context)
    expected, gamma, rotations = yarn_reference(s, d, context)
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    # r = 326, 103, 32.6 | 10.3, 3.3, 1.03 | 0.33, 0.10: every regime has dimensions
    assert (rotations > 32).sum() == 3 and (rotations < 1).sum() == 2
    torch.testing.assert_close(inv[:3], theta[:3], rtol=1e-12, atol=0)  # high frequency: not interpolated
    torch.testing.assert_close(inv[6:], theta[6:] / s, rtol=1e-12, atol=0)  # low frequency: θ/s, as PI
    torch.testing.assert_close(gamma[3:6], torch.tensor([0.75, 0.5, 0.25], dtype=torch.float64))
    torch.testing.assert_close(inv, expected, rtol=1e-12, atol=0)
    assert factor == pytest.approx(0.1 * math.log(8.0) + 1)  # eq. 22: √(1/t) = 0.1·ln(s) + 1 = 1.2079
    assert factor == pytest.approx(yarn_attention_factor(8.0))
    # beta_fast = 4: dimension 3 (10.3 rotations) is now high frequency and keeps θ; the ramp spans d = 3..6
    options = RopeScaling("yarn", s, beta_fast=4.0)
    narrower, _ = scaled_frequencies(options, base=10000.0, dim=d, original_max_len=context)
    torch.testing.assert_close(narrower, yarn_reference(s, d, context, beta=4.0)[0], rtol=1e-12, atol=0)
    assert narrower[3] == theta[3] and inv[3] < theta[3]


def test_yarn_scores_at_distinct_positions_use_those_frequencies_and_the_temperature():
    """q·k after rotation at m and n, from the rotation matrices: each pair (j, j + R) of the half layout turns
    by (n − m)·h(θ_j), so q^T R k = cos φ·(q_j k_j + q_J k_J) + sin φ·(q_J k_j − q_j k_J), J = j + R; both
    rotated vectors carry √(1/t), so the score carries 1/t = (0.1·ln s + 1)²."""
    torch.manual_seed(0)
    s, context = 8.0, 2048
    enc = rope(scaling={"type": "yarn", "factor": s, "original_max_len": context})
    q, k = torch.randn(1, 2, 1, 16, dtype=torch.float64), torch.randn(1, 2, 1, 16, dtype=torch.float64)
    h, _, _ = yarn_reference(s, 16, context)
    temperature = (0.1 * math.log(s) + 1) ** 2
    qa, qb, ka, kb = q[..., :8], q[..., 8:], k[..., :8], k[..., 8:]
    for m, n in [(5, 0), (0, 37), (1000, 3), (17, 4000), (3000, 2999)]:
        phi = (n - m) * h
        expected = temperature * (phi.cos() * (qa * ka + qb * kb) + phi.sin() * (qb * ka - qa * kb)).sum(-1)
        got = score(enc, q.float(), k.float(), m, n).double()
        torch.testing.assert_close(got, expected, atol=2e-4, rtol=1e-4)


def test_extended_copies_leave_the_trained_encoder_alone():
    enc = rope()
    long = enc.extended("yarn", 4.0)
    assert enc.scaling.type == "none" and long.scaling.type == "yarn"
    assert long.scaling.original_max_len == 64 and long.scaling.factor == 4.0


def test_dynamic_rope_changes_only_past_the_original_length():
    x = torch.randn(1, 2, 128, 16)
    dyn = rope(scaling={"type": "dynamic", "factor": 1.0})
    torch.testing.assert_close(
        dyn.rotate(x[:, :, :64], torch.arange(64)), rope().rotate(x[:, :, :64], torch.arange(64))
    )
    assert not torch.allclose(dyn.rotate(x, torch.arange(128)), rope().rotate(x, torch.arange(128)))


# -- ALiBi --------------------------------------------------------------------------------------
@pytest.mark.parametrize("heads", [2, 4, 8, 16])
def test_alibi_slopes_power_of_two(heads):
    """Press et al. §3: a geometric sequence that starts at 2^(−8/n) with that ratio."""
    assert alibi_slopes(heads) == pytest.approx([2.0 ** (-8 * h / heads) for h in range(1, heads + 1)])
    if heads == 8:
        assert alibi_slopes(8) == pytest.approx([1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32, 1 / 64, 1 / 128, 1 / 256])


def test_alibi_slopes_twelve_heads_follow_the_paper():
    expected = [2.0**-i for i in range(1, 9)] + [2**-0.5, 2**-1.5, 2**-2.5, 2**-3.5]
    assert alibi_slopes(12) == pytest.approx(expected)


SLOPES_8 = torch.tensor([2.0**-h for h in range(1, 9)])  # the paper's slopes for 8 heads


@pytest.mark.parametrize(
    ("q", "k"),
    [(torch.arange(6), torch.arange(6)), (torch.tensor([[0, 3, 4, 9]]), torch.tensor([[1, 2, 4, 7, 12]]))],
    ids=["consecutive", "batched-irregular"],
)
def test_alibi_bias_is_minus_slope_times_distance(q, k):
    """Causal: −m_h·(i − j) for every visible key j <= i; bidirectional: −m_h·|i − j| everywhere."""
    distance = (q[..., :, None] - k[..., None, :]).float()  # i − j
    expected_sym = -SLOPES_8.view(8, 1, 1) * distance.abs().unsqueeze(-3)
    sym = build_encoder("alibi", dim=64, num_heads=8, bidirectional=True).attention_bias(q, k)
    torch.testing.assert_close(sym, expected_sym, atol=1e-6, rtol=0)
    causal = build_encoder("alibi", dim=64, num_heads=8).attention_bias(q, k)
    visible = (distance >= 0).unsqueeze(-3).expand_as(causal)
    expected_causal = -SLOPES_8.view(8, 1, 1) * distance.unsqueeze(-3)
    torch.testing.assert_close(causal[visible], expected_causal.expand_as(causal)[visible], atol=1e-6, rtol=0)


# -- T5 / relative ------------------------------------------------------------------------------
def test_t5_buckets_reference_values():
    """HF _relative_position_bucket, causal, 32 buckets, max distance 128."""
    distance = torch.tensor([0, 1, 15, 16, 32, 64, 127, 128, 1000])
    buckets = t5_buckets(-distance, bidirectional=False, num_buckets=32, max_distance=128)
    assert buckets.tolist() == [0, 1, 15, 16, 21, 26, 31, 31, 31]


def test_t5_buckets_are_monotone_and_symmetric():
    d = torch.arange(0, 600)
    causal = t5_buckets(-d, False, 32, 128)
    assert torch.all(causal[1:] >= causal[:-1])
    back, ahead = t5_buckets(-d, True, 32, 128), t5_buckets(d, True, 32, 128)
    assert torch.all(back[1:] >= back[:-1])
    torch.testing.assert_close(ahead[1:], back[1:] + 16)  # same distance class, other direction
    assert t5_buckets(d, False, 32, 128).eq(0).all()  # causal: the future shares bucket 0


def test_t5_and_relative_biases_have_one_value_per_bucket_and_head():
    for name, options in (("t5", {}), ("relative", {"max_distance": 3})):
        enc = build_encoder(name, dim=32, num_heads=2, **options)
        torch.nn.init.normal_(enc.bias.weight)
        bias = enc.attention_bias(torch.arange(10), torch.arange(10))
        assert bias.shape == (2, 10, 10)
        torch.testing.assert_close(bias[:, 5, 2], bias[:, 8, 5])  # same offset, same bias
    clipped = enc.attention_bias(torch.arange(10), torch.arange(10))
    torch.testing.assert_close(clipped[:, 9, 0], clipped[:, 9, 6])  # offsets -9 and -3 clip to -3
    torch.testing.assert_close(clipped[:, 0, 9], enc.bias.weight[6])  # +9 clips to +3


def test_batched_positions_give_batched_biases_and_rotations():
    steps = torch.stack((torch.arange(6), torch.arange(6) * 2))
    for name in [n for n in available_encoders() if encoder_class(n).uses("attention_bias")]:
        bias = build_encoder(name, dim=32, num_heads=2).attention_bias(steps, steps)
        assert bias.shape == (2, 2, 6, 6)
    out = rope().rotate(torch.randn(2, 2, 6, 16), steps)
    assert out.shape == (2, 2, 6, 16)


def test_apply_rotary_matches_rope_encoder():
    enc = rope(layout="interleaved")
    x = torch.randn(1, 2, 3, 16)
    angles = torch.arange(3)[:, None].double() * default_inv_freq(10000.0, 16)
    torch.testing.assert_close(enc.rotate(x, torch.arange(3)), apply_rotary(x, angles.float(), "interleaved"))


OFFSET_ONLY = [n for n in available_encoders() if encoder_class(n).uses("relative_bias")]


@pytest.mark.parametrize("name", OFFSET_ONLY)
def test_every_offset_only_bias_is_toeplitz_and_not_constant(name):
    """An encoder that claims to depend on the offset alone (it overrides relative_bias): equal offsets,
    equal bias, on positions far from the origin too; with random parameters the bias is not one value."""
    enc = build_encoder(name, dim=32, num_heads=2)
    for p in enc.parameters():
        torch.nn.init.normal_(p)
    steps = torch.arange(100, 112).float()[None]  # batched floats: the general path, no Toeplitz shortcut
    bias = enc.attention_bias(steps, steps)[0]
    for d in range(-11, 12):
        diagonal = torch.diagonal(bias, offset=d, dim1=-2, dim2=-1)
        torch.testing.assert_close(diagonal, diagonal[:, :1].expand_as(diagonal))
    assert bias.std() > 0


@pytest.mark.parametrize("name", OFFSET_ONLY)
@pytest.mark.parametrize(("q", "k"), [(torch.arange(7), torch.arange(7)), (torch.arange(3, 8), torch.arange(0, 9))])
def test_consecutive_positions_take_the_toeplitz_path_with_the_same_result(name, q, k):
    from poslab.positions.offsets import offset_bias, relative_distances

    enc = build_encoder(name, dim=32, num_heads=2)
    for p in enc.parameters():
        torch.nn.init.normal_(p)
    fast = enc.attention_bias(q, k)
    captured = {}

    def values_at(offsets):
        captured["shape"] = offsets.shape
        return torch.zeros(2, *offsets.shape)

    offset_bias(values_at, q, k, int(q[0]), int(k[0]))
    assert captured["shape"] == (q.numel() + k.numel() - 1,)  # only the distinct offsets were computed
    general = enc.attention_bias(q.float()[None] + 0, k.float()[None] + 0)[0]  # batched: the general path
    torch.testing.assert_close(fast, general)
    assert relative_distances(q, k).shape == (q.numel(), k.numel())
