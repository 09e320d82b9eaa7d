"""PoPE (Gopalakrishnan et al. 2025; reference: lucidrains/PoPE-pytorch): attention through the encoder's
query and key hooks against the reference's ``apply_pope_to_qk`` and its SDPA call, written out here."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from poslab.encoders import build_encoder


def reference_attention(q, k, v, positions, inv_freqs, bias, causal: bool) -> torch.Tensor:
    """``PoPE.forward`` (freqs = pos ⊗ inv_freqs, bias clamped to [−2π, 0]), ``apply_pope_to_qk`` (softplus
    magnitudes; ``(d two)`` interleaving) and ``flash_attn_with_pope``'s SDPA with ``softmax_scale`` d^−½."""
    freqs = positions[:, None].float() * inv_freqs[None, :]
    with_bias = freqs + bias.clamp(-2.0 * math.pi, 0.0)[:, None, :]
    q, k = F.softplus(q), F.softplus(k)
    q = torch.stack((q * freqs.cos(), q * freqs.sin()), dim=-1).flatten(-2)
    k = torch.stack((k * with_bias.cos(), k * with_bias.sin()), dim=-1).flatten(-2)
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=v.shape[-1] ** -0.5)


@pytest.mark.parametrize("causal", [True, False])
def test_attention_through_the_hooks_is_the_references(causal):
    torch.manual_seed(0)
    heads, d, length = 2, 16, 10
    encoder = build_encoder("pope", dim=heads * d, num_heads=heads)
    with torch.no_grad():
        encoder.phase.uniform_(-7.0, 1.0)  # some past the clamp at both ends
    q, k, v = (torch.randn(2, heads, length, d) for _ in range(3))
    positions = torch.arange(length)
    got = F.scaled_dot_product_attention(encoder.rotate_query(q, positions), encoder.rotate_key(k, positions), v,
                                         is_causal=causal)  # fmt: skip
    inv_freqs = 10000.0 ** -(torch.arange(d).float() / d)  # one frequency per channel
    want = reference_attention(q, k, v, positions, inv_freqs, encoder.phase.detach(), causal)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_content_sets_the_magnitude_and_position_only_the_phase():
    """A query's content cannot move where its key peaks: at phase bias 0 every channel's term is largest at
    offset 0, whatever q and k hold (RoPE's content-dependent phase can peak elsewhere)."""
    encoder = build_encoder("pope", dim=8, num_heads=1, phase_bias=False)
    q, k = torch.randn(1, 1, 1, 8), torch.randn(1, 1, 1, 8)
    positions = torch.arange(9)
    rq = encoder.rotate_query(q.expand(1, 1, 9, 8), positions)
    rk = encoder.rotate_key(k.expand(1, 1, 9, 8), positions)
    scores = (rq @ rk.transpose(-1, -2))[0, 0]
    assert all(scores[n].argmax().item() == n for n in range(9))


def test_a_class_token_keeps_phase_zero_and_its_key_the_bias():
    encoder = build_encoder("pope", dim=8, num_heads=1)
    with torch.no_grad():
        encoder.phase.fill_(-1.0)
    x = torch.randn(1, 1, 4, 8)
    keys = encoder.rotate_tokens("rotate_key", x, torch.arange(3), prefix=1)
    queries = encoder.rotate_tokens("rotate_query", x, torch.arange(3), prefix=1)
    magnitude = F.softplus(x[0, 0, 0]) * 2**0.25
    torch.testing.assert_close(queries[0, 0, 0, 0::2], magnitude)  # cos 0
    torch.testing.assert_close(keys[0, 0, 0, 1::2], magnitude * math.sin(-1.0))
    torch.testing.assert_close(keys[..., 1:, :], encoder.rotate_key(x[..., 1:, :], torch.arange(3)))
