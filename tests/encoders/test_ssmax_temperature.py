"""``ssmax`` against Nakanishi 2025 (eq. 2, Figure 1) and ``temperature`` against Llama 4's query scale, in
what the backbone's attention computes."""

from __future__ import annotations

import math

import pytest
import torch

from poslab.encoders import build_encoder, build_encoder_in_context
from tests.encoders.test_attention_computes import (
    DIM,
    HEADS,
    LENGTH,
    check_layers,
    model_with,
    plain_scores,
    rotary_scores,
    rotation_pairs,
)


def ssmax_probabilities(z: torch.Tensor, s: float, n: int) -> torch.Tensor:
    """Eq. 2: z_j ↦ n^(s·z_j) / Σ_t n^(s·z_t)."""
    powers = torch.tensor([n ** (s * v) for v in z.tolist()], dtype=torch.float64)
    return powers / powers.sum()


def test_figure_1_softmax_fades_with_the_input_size_and_ssmax_does_not():
    """The paper's Figure 1: −2 everywhere but +3 last, s = 0.43: Softmax's largest output falls towards 0 as
    n grows, SSMax's stays near 1 — computed from queries the encoder scales."""
    enc = build_encoder("ssmax", dim=4, num_heads=1, init_scale=0.43, max_len=16)
    for n, softmax_max in ((10, 0.943), (1000, 0.129)):
        k = torch.full((1, 1, n, 4), -1.0)
        k[..., -1, :] = 1.5  # q·k = −2 for every key but the last (+3) with q = (1, 1, 0, 0) · … below
        q = torch.zeros(1, 1, n, 4)
        q[..., :2] = 1.0
        z = (q[0, 0, -1] @ k[0, 0].T) / 1.0  # the logits of the last query (n keys under a causal mask)
        assert z[:-1].eq(-2).all() and z[-1] == 3
        scaled = enc.rotate_query(q, torch.arange(n))[0, 0, -1] @ k[0, 0].T  # s·log n · z
        probabilities = scaled.double().softmax(-1)
        torch.testing.assert_close(probabilities, ssmax_probabilities(z, 0.43, n), rtol=1e-5, atol=1e-7)
        assert z.double().softmax(-1).max().item() == pytest.approx(softmax_max, abs=1e-3)
        assert probabilities.max() > 0.94  # 0.940 at n = 10, 0.9996 at n = 1,000


@pytest.mark.parametrize("causal", [True, False])
def test_ssmax_attention_scales_each_querys_logits_by_s_log_n(causal):
    """Every layer attends with softmax(s_h · log n_i · q·k/√d): n_i = i + 1 keys under the causal mask, all L
    otherwise (the task tells the encoder which), with a different s per head."""
    context = {"max_len": 64, "bidirectional": not causal}
    encoder = build_encoder_in_context("ssmax", dim=DIM, num_heads=HEADS, options={}, context=context)
    assert encoder.scale.tolist() == pytest.approx([1 / math.log(64)] * HEADS)  # plain softmax at length 64
    with torch.no_grad():
        encoder.scale.copy_(torch.tensor([0.3, 1.7]))
    n = torch.arange(1, LENGTH + 1, dtype=torch.float64) if causal else torch.full((LENGTH,), float(LENGTH))
    scale = torch.tensor([0.3, 1.7], dtype=torch.float64).view(1, HEADS, 1, 1) * n.log().view(1, 1, -1, 1)
    check_layers(model_with(encoder, depth=2, causal=causal), lambda _: lambda q, k: scale * plain_scores(q, k), causal)


def test_rope_with_ssmax_scales_ropes_scores():
    options = {"rope": {"base": 100.0, "layout": "interleaved"}, "ssmax": {"init_scale": 0.5}}
    context = {"max_len": 64, "bidirectional": False}
    encoder = build_encoder_in_context("rope+ssmax", dim=DIM, num_heads=HEADS, options=options, context=context)
    log_n = torch.arange(1, LENGTH + 1, dtype=torch.float64).log().view(1, 1, -1, 1)
    check_layers(
        model_with(encoder), lambda _: lambda q, k: 0.5 * log_n * rotary_scores(q, k, 100.0, "interleaved"), True
    )


@pytest.mark.parametrize(
    ("position", "factor"),
    [
        (0, 1.0),
        (8190, 1.0),
        (8191, 1 + 0.1 * math.log(2)),
        (3 * 8192 - 1, 1 + 0.1 * math.log(4)),
        (3 * 8192 - 2, 1 + 0.1 * math.log(3)),
    ],
)
def test_llama4_temperature_at_named_positions(position, factor):
    """Llama 4 (F = 8,192, a = 0.1): 1 + a·log(⌊(i + 1)/F⌋ + 1); a shift of one position across a step fails."""
    enc = build_encoder("temperature", dim=8, num_heads=1, floor_scale=8192)
    assert enc.factor(torch.tensor([position]))[0].item() == pytest.approx(factor, rel=1e-6)


@pytest.mark.parametrize(
    ("max_len", "position", "factor"),
    [
        (64, 0, 1.0),
        (64, 1, 1 + 0.1 * math.log(2)),  # F = 64 / 32 = 2: the second token already past the first step
        (64, 63, 1 + 0.1 * math.log(33)),
        (4096, 126, 1.0),  # F = 128
        (4096, 127, 1 + 0.1 * math.log(2)),
        (None, 8190, 1.0),  # no context known: Llama 4's own F, 8,192
        (None, 8191, 1 + 0.1 * math.log(2)),
    ],
)
def test_llama4_temperature_floor_defaults_to_llama4s_ratio_to_the_context(max_len, position, factor):
    """Llama 4: F = 8,192 against a 256K-token training context; left unset, F keeps that ratio (1/32), so the
    temperature acts inside the training context (F = the context would keep it at 1 there)."""
    enc = build_encoder("temperature", dim=8, num_heads=1, max_len=max_len)
    assert enc.factor(torch.tensor([position]))[0].item() == pytest.approx(factor, rel=1e-6)


def test_irope_with_temperature_scales_only_its_nope_layer():
    """``rope,rope,rope,temperature``: layers 0-2 attend with RoPE, layer 3 with q·k scaled by the temperature
    of each query's position (F = 4 makes it visible in 12 tokens)."""
    options = {"rope": {"base": 100.0}, "temperature": {"floor_scale": 4, "attn_scale": 0.5}}
    encoder = build_encoder_in_context(
        "rope,rope,rope,temperature", dim=DIM, num_heads=HEADS, options=options, context={"max_len": 64}
    )
    steps = torch.arange(LENGTH, dtype=torch.float64)
    factor = (1 + 0.5 * torch.log1p(torch.floor((steps + 1) / 4))).view(1, 1, -1, 1)
    assert factor.max() > 1.5
    rope = lambda q, k: rotary_scores(q, k, 100.0, "half")  # noqa: E731
    check_layers(
        model_with(encoder, depth=4), lambda i: rope if i < 3 else lambda q, k: factor * plain_scores(q, k), True
    )


@pytest.mark.parametrize("name", ["ssmax", "rope+ssmax"])
def test_with_a_class_token_ssmax_counts_every_key_attention_sees_and_scales_every_query(name):
    """A ViT's class token is a key every query sees: n = L + 1 for each of the L + 1 queries (the class
    token's too), not L for the positioned ones alone; RoPE still leaves the class token unrotated."""
    from poslab.positions import Positions
    from tests.encoders.test_attention_computes import attention_from_scores

    ssmax = {"init_scale": 0.5}
    options = {"rope": {"base": 100.0, "layout": "interleaved"}, "ssmax": ssmax} if "+" in name else ssmax
    context = {"max_len": 64, "bidirectional": True}
    encoder = build_encoder_in_context(name, dim=DIM, num_heads=HEADS, options=options, context=context)
    model = model_with(encoder, causal=False)
    torch.manual_seed(1)
    x = torch.randn(2, LENGTH + 1, DIM)  # the class token first, then LENGTH positioned tokens
    seen = []
    hook = model.blocks[0].attn.register_forward_hook(lambda m, args, out: seen.append((args[0], out)))
    with torch.no_grad():
        model(x, Positions(steps=torch.arange(LENGTH)), num_prefix_tokens=1)
    hook.remove()
    (inputs, out), scale = seen[0], 0.5 * math.log(LENGTH + 1)

    def rotated(x):  # RoFormer's rotation of the positioned tokens 0 .. L-1; the class token as it is
        a, b = rotation_pairs(x.shape[-1], "interleaved")
        theta = 100.0 ** (-2.0 * torch.arange(x.shape[-1] // 2, dtype=torch.float64) / x.shape[-1])
        turned = torch.complex(x[..., 1:, a], x[..., 1:, b]) * torch.polar(
            torch.ones(LENGTH, len(a), dtype=torch.float64), torch.arange(LENGTH)[:, None] * theta
        )
        out = x.clone()
        out[..., 1:, a], out[..., 1:, b] = turned.real, turned.imag
        return out

    def scores(q, k):
        return scale * (plain_scores(rotated(q), rotated(k)) if "+" in name else plain_scores(q, k))

    expected = attention_from_scores(model.blocks[0].attn, inputs, scores, causal=False)
    torch.testing.assert_close(out.double(), expected, rtol=2e-4, atol=2e-5)
