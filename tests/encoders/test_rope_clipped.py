"""CoPE, clipped RoPE (Li et al. 2026; reference: hrlics/CoPE ``modeling_cope.py``): the frequency ladder,
the raised-cosine taper over its slowest ``clip`` frequencies, and the attention it makes, written out here
from the reference's ``LlamaRotaryEmbedding`` and ``apply_rotary_pos_emb``."""

from __future__ import annotations

import math

import pytest
import torch

from poslab.encoders import build_encoder, build_encoder_in_context
from poslab.errors import ConfigError


def reference_inv_freq(base: float, head_dim: int, clip: int, hard: bool = False) -> torch.Tensor:
    """HF's default ladder, then CoPE's ``smooth_mask`` (or HardClip's zeros) over its last ``clip``."""
    inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    start = len(inv_freq) - clip
    if hard:
        inv_freq[start:] = 0.0
    else:
        theta = torch.linspace(0.0, torch.pi, steps=clip, dtype=torch.float64)
        inv_freq[start:] = inv_freq[start:] * 0.5 * (1.0 + torch.cos(theta))
    return inv_freq


def reference_rotary(x: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """``q * cos + rotate_half(q) * sin`` with ``emb = cat(freqs, freqs)``."""
    freqs = positions[:, None].double() * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    half = x.shape[-1] // 2
    rotated_half = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return (x.double() * emb.cos() + rotated_half.double() * emb.sin()).to(x.dtype)


@pytest.mark.parametrize("hard", [False, True], ids=["cosine", "hard"])
def test_the_reference_model_tapers_its_20_slowest_of_64_frequencies(hard):
    """Llama-3-8B as the reference trains it: head size 128, base 500,000, ``clip_low_n = 20``."""
    encoder = build_encoder("rope_clipped", dim=128, num_heads=1, base=500000.0, clip=20,
                            taper="hard" if hard else "cosine")  # fmt: skip
    got = encoder.frequencies()[0]
    torch.testing.assert_close(got, reference_inv_freq(500000.0, 128, 20, hard), rtol=1e-12, atol=0.0)
    plain = 500000.0 ** (-torch.arange(64, dtype=torch.float64) / 64)
    torch.testing.assert_close(got[:44], plain[:44], rtol=1e-12, atol=0.0)  # the fast 44 untouched
    assert (
        got[44] == (0.0 if hard else plain[44]) and got[63] == 0.0
    )  # the first clipped kept (cosine), the last frozen
    if not hard:
        assert got[54].item() == pytest.approx(plain[54].item() * 0.5 * (1 + math.cos(math.pi * 10 / 19)), rel=1e-12)


def test_by_default_it_clips_the_frequencies_slower_than_the_training_context():
    """Base 10,000, head size 32, context 64: θ_4 = 10⁻¹ turns once in 62.8 tokens, θ_5 = 10^(−5/4) in 111.7,
    so the 11 from θ_5 on are clipped; at context 16, θ_2 (period 19.9) is the first of 14."""
    for context, clipped in ((64, 11), (16, 14)):
        encoder = build_encoder_in_context("rope_clipped", dim=64, num_heads=2, options={},
                                           context={"max_len": context})  # fmt: skip
        assert encoder.clip == clipped
        torch.testing.assert_close(encoder.frequencies()[0], reference_inv_freq(10000.0, 32, clipped), rtol=1e-12,
                                   atol=0.0)  # fmt: skip


def test_queries_and_keys_turn_as_the_reference_turns_them():
    torch.manual_seed(0)
    x, positions = torch.randn(2, 2, 9, 16), torch.arange(9)
    encoder = build_encoder("rope_clipped", dim=32, num_heads=2, base=100.0, clip=3)
    want = reference_rotary(x, positions, reference_inv_freq(100.0, 16, 3))
    torch.testing.assert_close(encoder.rotate(x, positions), want, rtol=1e-5, atol=1e-5)


def test_a_scaled_extension_keeps_the_taper():
    """The reference re-applies the mask after a dynamic update: PI's frequencies, then the taper."""
    encoder = build_encoder("rope_clipped", dim=32, num_heads=1, clip=4, max_len=64)
    pi = encoder.extended("linear", 4.0)
    torch.testing.assert_close(pi.frequencies()[0], reference_inv_freq(10000.0, 32, 4) / 4.0, rtol=1e-12, atol=0.0)


def test_without_a_context_or_with_too_many_it_says_so():
    with pytest.raises(ConfigError, match="needs max_len"):
        build_encoder("rope_clipped", dim=32, num_heads=2)
    with pytest.raises(ConfigError, match="clip=9 is more than the 8 frequencies"):
        build_encoder("rope_clipped", dim=32, num_heads=2, clip=9)
