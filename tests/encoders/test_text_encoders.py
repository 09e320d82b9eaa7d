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
    """Vaswani et al.: dim 4, positions 0..3 (values from the issue, rounded to 3 places)."""
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


def test_yarn_frequencies_lie_between_interpolated_and_original():
    s, d, context = 8.0, 64, 4096
    inv, factor = scaled_frequencies(RopeScaling("yarn", s), base=10000.0, dim=d, original_max_len=context)
    original = default_inv_freq(10000.0, d)
    assert torch.all(inv <= original * (1 + 1e-12)) and torch.all(inv >= original / s * (1 - 1e-12))
    # high-frequency dimensions (more than beta_fast rotations over the context) are left alone ...
    rotations = context / (2 * math.pi / original)
    fast = rotations > 32
    assert fast.any()
    torch.testing.assert_close(inv[fast], original[fast])
    # ... and those under beta_slow rotations are fully interpolated
    slow = rotations < 1
    torch.testing.assert_close(inv[slow], original[slow] / s)
    assert factor == pytest.approx(0.1 * math.log(s) + 1)


def test_yarn_attention_factor_scales_logits_by_its_square():
    q = torch.randn(1, 2, 1, 16)
    plain = rope(scaling={"type": "linear", "factor": 4.0})
    yarn = rope(
        scaling={"type": "yarn", "factor": 4.0, "beta_fast": 1e9, "beta_slow": 1e9 / 2}
    )  # ramp at 0: all dims interpolate
    base = score(plain, q, q, 3, 3)
    torch.testing.assert_close(score(yarn, q, q, 3, 3), base * yarn_attention_factor(4.0) ** 2, rtol=1e-4, atol=1e-5)


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
def test_alibi_slopes_power_of_two():
    assert alibi_slopes(8) == pytest.approx([2.0**-i for i in range(1, 9)])


def test_alibi_slopes_twelve_heads_follow_the_paper():
    expected = [2.0**-i for i in range(1, 9)] + [2**-0.5, 2**-1.5, 2**-2.5, 2**-3.5]
    assert alibi_slopes(12) == pytest.approx(expected)


def test_alibi_bias_is_linear_in_distance():
    enc = build_encoder("alibi", dim=32, num_heads=2)
    bias = enc.attention_bias(torch.arange(5), torch.arange(5))
    assert bias.shape == (2, 5, 5)
    slopes = torch.tensor(alibi_slopes(2))
    torch.testing.assert_close(bias[:, 4, :], -slopes[:, None] * torch.tensor([4.0, 3, 2, 1, 0]))
    sym = build_encoder("alibi", dim=32, num_heads=2, bidirectional=True).attention_bias(
        torch.arange(5), torch.arange(5)
    )
    torch.testing.assert_close(sym, sym.transpose(-1, -2))
    assert (sym <= 0).all()


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
    for name in ("alibi", "t5", "relative"):
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
@pytest.mark.parametrize(("q", "k"), [(torch.arange(7), torch.arange(7)), (torch.arange(3, 8), torch.arange(0, 9))])
def test_consecutive_positions_take_the_toeplitz_path_with_the_same_result(name, q, k):
    from poslab.encoders.offsets import offset_bias, relative_distances

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
