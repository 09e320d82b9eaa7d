"""Per-layer encoders and the hooks that tell queries from keys or read the logits, seen from attention."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from poslab.config.composition import compose
from poslab.encoders import build_encoder
from poslab.nn import attention
from poslab.nn.attention import AttentionBias, attend, attend_with_content
from poslab.nn.backbone import Transformer


def spy_attention(monkeypatch, model: Transformer):
    """Per layer: (q, k as projected, q and k as attention received them, the bias it was given)."""
    seen, projected = [], []
    for block in model.blocks:
        block.attn.qkv.register_forward_hook(lambda module, args, out: projected.append(out))

    def record(q, k, v, bias, causal, dropout, *rest):
        seen.append((q, k, bias))
        return (attend_with_content if rest else attend)(q, k, v, bias, causal, dropout, *rest)

    monkeypatch.setattr(attention, "attend", lambda *a: record(*a))
    monkeypatch.setattr(attention, "attend_with_content", lambda *a: record(*a))
    return seen, projected


def raw_qk(out: torch.Tensor, heads: int):
    batch, length, three_dim = out.shape
    q, k, _ = out.view(batch, length, 3, heads, three_dim // 3 // heads).permute(2, 0, 3, 1, 4)
    return q, k


@pytest.mark.parametrize("name", ["rnope", "rope,rope,rope,none"])
def test_a_nope_layer_of_a_hybrid_receives_no_rotation(name, monkeypatch):
    encoder = build_encoder(name, dim=32, num_heads=2)
    model = Transformer(encoder, dim=32, depth=8, num_heads=2, causal=True)
    seen, projected = spy_attention(monkeypatch, model)
    model(torch.randn(2, 12, 32), torch.arange(12))
    assert len(seen) == 8
    for layer, ((q, k, _), out) in enumerate(zip(seen, projected, strict=True)):
        raw_q, raw_k = raw_qk(out, 2)
        unrotated = torch.equal(q, raw_q) and torch.equal(k, raw_k)
        assert unrotated == (layer in (3, 7)), f"layer {layer}"


def test_a_bias_hybrid_gives_each_layer_its_own_bias_made_once_per_forward_pass(monkeypatch):
    model = Transformer(build_encoder("alibi,t5,none", dim=32, num_heads=2), dim=32, depth=6, num_heads=2)
    seen, _ = spy_attention(monkeypatch, model)
    model(torch.randn(1, 10, 32), torch.arange(10))
    biases = [bias for _, _, bias in seen]
    assert biases[2] is None and biases[5] is None
    assert biases[0] is biases[3] and biases[1] is biases[4] and biases[0] is not biases[1]
    alibi = build_encoder("alibi", dim=32, num_heads=2).attention_bias(torch.arange(10), torch.arange(10))
    torch.testing.assert_close(biases[0].full(10, 10)[0], alibi)


def test_layer_options_and_validation_come_from_the_members():
    cfg = compose(["modality=text", "encoder=rope,rope,rope,none", "encoder.rope.base=500"])
    assert cfg.encoder.name == "rope,rope,rope,none" and cfg.encoder.rope.base == 500
    from poslab.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown encoder 'rpoe'"):
        compose(["modality=text", "encoder=rope,rpoe"])
    with pytest.raises(ConfigError, match="no composites inside it"):
        compose(["modality=text", "encoder=rope+alibi,none"])


def test_attention_with_written_out_logits_equals_the_fused_kernels_without_a_content_bias():
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 2, 2, 9, 8)
    bias = torch.randn(1, 2, 9, 9)
    no_content = lambda q, k, logits: None  # noqa: E731
    fused = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(attend_with_content(q, k, v, None, True, 0.0, no_content), fused)
    expected = attend(q, k, v, AttentionBias(dense=bias, causal=True), True, 0.0)
    got = attend_with_content(q, k, v, AttentionBias(dense=bias, causal=True), True, 0.0, no_content)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_written_out_logits_stay_float32_under_bf16_autocast():
    """Mixed precision leaves the fused kernels' scores in float32; the written-out path (CoPE) keeps them in
    float32 too, content bias included, instead of autocast's bf16 matmuls."""
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 2, 2, 16, 32)
    seen = []

    def content(q, k, logits):
        seen.append((logits.dtype, (q @ k.transpose(-1, -2)).dtype))
        return None

    expected = attend_with_content(q, k, v, None, True, 0.0, content)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = attend_with_content(q, k, v, None, True, 0.0, content)
    assert seen[-1] == (torch.float32, torch.float32)
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)


def test_a_content_bias_is_added_to_the_logits_before_the_softmax():
    q, k, v = torch.randn(3, 1, 1, 5, 4)
    shift = torch.randn(1, 1, 5, 5)
    got = attend_with_content(q, k, v, None, False, 0.0, lambda q, k, logits: shift)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=shift)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
