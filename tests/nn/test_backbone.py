"""The backbone calls each hook, and each hook changes the output.

Tiny fake encoders, one per hook, stand in for real ones: the backbone must
work for any encoder without knowing its name.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import poslab.run.denormals
from poslab.encoders import PositionEncoder
from poslab.nn import SelfAttention, Transformer
from poslab.nn.attention import AttentionBias, attend


class Recorder(PositionEncoder):
    """Counts hook calls and records the token counts it saw."""

    def __init__(self, dim=16, num_heads=2):
        super().__init__(dim, num_heads)
        self.calls = {"encode_input": [], "rotate": [], "attention_bias": []}


class AddsToInput(Recorder):
    def encode_input(self, x, pos):
        self.calls["encode_input"].append(x.shape[1])
        # a channel-constant shift would vanish in LayerNorm: mark one channel
        return x + F.one_hot(torch.tensor(0), x.shape[-1]).float() * pos.float()[..., None]


class Rotates(Recorder):
    def rotate(self, x, pos):
        self.calls["rotate"].append(x.shape[-2])
        return x.flip(-1) * (1 + pos.float()[:, None])


class Biases(Recorder):
    def attention_bias(self, q_pos, k_pos):
        self.calls["attention_bias"].append(q_pos.shape[-1])
        return -(q_pos[:, None] - k_pos[None, :]).abs().float().expand(self.num_heads, -1, -1)


def make(encoder, depth=2, causal=False):
    torch.manual_seed(0)
    return Transformer(encoder, dim=16, depth=depth, num_heads=2, mlp_ratio=2.0, causal=causal)


@pytest.mark.parametrize("fake", [AddsToInput, Rotates, Biases])
def test_each_hook_is_called_and_changes_the_output(fake):
    x, pos = torch.randn(2, 5, 16), torch.arange(5)
    with_hook = make(fake())
    without = make(Recorder())
    without.load_state_dict(with_hook.state_dict())
    out = with_hook(x, pos)
    hook = fake.__dict__.keys() & {"encode_input", "rotate", "attention_bias"}
    (name,) = hook
    calls = with_hook.encoder.calls[name]
    expected = {"encode_input": 1, "rotate": 2 * 2, "attention_bias": 1}[name]  # rotate: q and k per layer
    assert len(calls) == expected
    assert not torch.allclose(out, without(x, pos), atol=1e-4)


def test_bias_is_computed_once_per_forward_for_all_layers():
    model = make(Biases(), depth=4)
    model(torch.randn(1, 6, 16), torch.arange(6))
    assert model.encoder.calls["attention_bias"] == [6]


@pytest.mark.parametrize("fake", [AddsToInput, Rotates, Biases])
def test_prefix_tokens_carry_no_position(fake):
    """The class token is neither embedded, rotated nor biased: hooks see only positioned tokens."""
    model = make(fake())
    x = torch.randn(2, 1 + 4, 16)
    model(x, torch.arange(4), num_prefix_tokens=1)
    for seen in model.encoder.calls.values():
        assert all(n == 4 for n in seen)


def test_no_op_encoder_leaves_a_permutation_equivariant_model():
    model = make(Recorder())
    x = torch.randn(1, 6, 16)
    perm = torch.randperm(6)
    torch.testing.assert_close(
        model(x, torch.arange(6))[:, perm], model(x[:, perm], torch.arange(6)), atol=1e-5, rtol=0
    )


def test_causal_masking_with_and_without_bias():
    for enc in (Recorder(), Biases()):
        model = make(enc, causal=True)
        x = torch.randn(1, 6, 16)
        full = model(x, torch.arange(6))
        prefix = model(x[:, :3], torch.arange(3))
        torch.testing.assert_close(full[:, :3], prefix, atol=1e-5, rtol=0)  # the future does not leak


@pytest.mark.parametrize("fake", [Recorder, Rotates, Biases], ids=["no-bias", "rotate", "bias"])
def test_causal_rule_and_structure_mask_both_apply(fake):
    """A causal backbone given a structure mask keeps the causal rule, with or without a bias."""
    model = make(fake(), causal=True)
    allowed = torch.ones(6, 6, dtype=torch.bool)
    allowed[3:, 1] = False  # rows 3.. may not see token 1
    x = torch.randn(1, 6, 16)
    out = model(x, torch.arange(6), allowed=allowed)
    future = x.clone()
    future[:, 4:] += torch.randn(1, 2, 16)  # random: a channel-constant shift would vanish in LayerNorm
    torch.testing.assert_close(model(future, torch.arange(6), allowed=allowed)[:, :4], out[:, :4], atol=1e-5, rtol=0)
    hidden = x.clone()
    hidden[:, 1] += torch.randn(16)
    # one layer: only rows 1 and 2 see token 1 (with two, rows 3.. would see it through rows 1 and 2)
    one_layer = make(fake(), depth=1, causal=True)
    changed = one_layer(hidden, torch.arange(6), allowed=allowed) - one_layer(x, torch.arange(6), allowed=allowed)
    assert changed[:, 3:].abs().max() < 1e-5 and changed[:, 1].abs().max() > 1e-3


def test_attention_is_softmax_of_scaled_scores_plus_bias():
    """SDPA scale 1/√Dh applies to q·k; the bias is added after it (not scaled)."""
    torch.manual_seed(0)
    attn = SelfAttention(8, 2)
    enc = Recorder(8, 2)
    x = torch.randn(1, 4, 8)
    bias = torch.randn(1, 2, 4, 4)
    q, k, v = attn.qkv(x).view(1, 4, 3, 2, 4).permute(2, 0, 3, 1, 4)
    weights = F.softmax(q @ k.transpose(-1, -2) / math.sqrt(4) + bias, dim=-1)
    expected = attn.proj((weights @ v).transpose(1, 2).reshape(1, 4, 8))
    torch.testing.assert_close(attn(x, enc, torch.arange(4), bias=AttentionBias(dense=bias, causal=False)), expected)


def assert_attends_as_sdpa(q, k, v, bias: AttentionBias, dense: torch.Tensor, inputs) -> None:
    """Causal ``attend`` with ``bias`` equals SDPA with ``dense`` (the bias written out, ``[.., L, L]``; −inf is
    put on the future here): outputs, and the gradients of ``inputs`` under a non-uniform upstream gradient."""
    length = q.shape[-2]
    fast = attend(q, k, v, bias, causal=True, dropout=0.0)
    future = torch.ones(length, length, dtype=torch.bool).triu(1)
    reference = F.scaled_dot_product_attention(q, k, v, attn_mask=dense.masked_fill(future, float("-inf")))
    torch.testing.assert_close(fast, reference)
    weights = torch.randn_like(fast)
    grads = torch.autograd.grad((fast * weights).sum(), inputs)
    expected = torch.autograd.grad((reference * weights).sum(), inputs)
    for got, want in zip(grads, expected, strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("whole", [0, 1 << 30], ids=["blocks", "whole"])  # bias laid out block by block / once
@pytest.mark.parametrize("budget", [4 * 2 * 2 * 9, 1 << 21])  # 4-row blocks, and one block
@pytest.mark.parametrize("bias_batch", [1, 2])
@pytest.mark.parametrize("learned", [False, True])
def test_causal_bias_kernels_agree_with_the_explicit_mask(learned, bias_batch, budget, whole, monkeypatch):
    """The CPU fast path (flash, is_causal + bias) equals SDPA with the -inf mask, values and gradients."""
    from poslab.nn.kernels import cpu_flash

    monkeypatch.setattr(cpu_flash, "BLOCK_ELEMENTS", budget)
    monkeypatch.setattr(cpu_flash, "FULL_MASK_ELEMENTS", whole)
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 9, 8, requires_grad=True) for _ in range(3))
    bias = torch.randn(bias_batch, 2, 9, 9, requires_grad=learned)  # [B, H, L, L]: per-sequence positions
    inputs = (q, k, v, bias) if learned else (q, k, v)
    assert_attends_as_sdpa(q, k, v, AttentionBias(dense=bias, causal=True), bias, inputs)


@pytest.mark.parametrize("whole", [0, 1 << 30], ids=["blocks", "whole"])  # bias laid out block by block / once
@pytest.mark.parametrize("budget", [2 * 2 * 11 * 3, 2 * 2 * 11 * 5, 1 << 21])  # 3- and 5-row blocks, one block
@pytest.mark.parametrize("learned", [False, True])
def test_offset_bias_kernel_builds_each_block_from_the_offsets(learned, budget, whole, monkeypatch):
    """An offset-only bias given as its 2L − 1 values: the blocked CPU kernel equals SDPA with the
    bias B[h, i, j] = values[h, j − i + L − 1] written out entry by entry, values and gradients (the
    values' gradient is the sum of dS along each diagonal)."""
    from poslab.nn.kernels import cpu_flash

    monkeypatch.setattr(cpu_flash, "BLOCK_ELEMENTS", budget)
    monkeypatch.setattr(cpu_flash, "FULL_MASK_ELEMENTS", whole)
    torch.manual_seed(0)
    length = 11
    q, k, v = (torch.randn(2, 2, length, 8, requires_grad=True) for _ in range(3))
    values = torch.randn(2, 2 * length - 1, requires_grad=learned)
    dense = torch.stack(
        [torch.stack([values[h, j - i + length - 1] for j in range(length)]) for h in range(2) for i in range(length)]
    ).view(1, 2, length, length)
    inputs = (q, k, v, values) if learned else (q, k, v)
    assert_attends_as_sdpa(q, k, v, AttentionBias(offsets=values, causal=True), dense, inputs)


# how a bias flat beyond R runs: (rows per band block, split near / far keys, band gradient)
FLAT_PATHS = {
    "split-3": (3, True, True),
    "split-4": (4, True, True),
    "band": (4, False, True),
    "written-out": (4, False, False),
}


@pytest.mark.parametrize("whole", [0, 1 << 30], ids=["blocks", "whole"])
@pytest.mark.parametrize("path", list(FLAT_PATHS))
@pytest.mark.parametrize("radius", [1, 5])
@pytest.mark.parametrize("learned", [False, True])
def test_flat_offset_bias_equals_sdpa_with_the_clamped_bias_written_out(learned, radius, path, whole, monkeypatch):
    """A bias flat beyond R, given as its 2R + 1 values: B[h, i, j] = values[h, clamp(j − i, −R, R) + R]. Values
    and gradients equal SDPA with that bias written out entry by entry on every path: near keys apart from far
    ones (3- and 4-row blocks: a short last block, windows that start before key 0) or one masked call; the bias
    gradient from the band of offsets within R or from the written-out backward."""
    from poslab.nn.kernels import cpu_flash

    rows, split, band = FLAT_PATHS[path]
    monkeypatch.setattr(cpu_flash, "BLOCK_ELEMENTS", 2 * 2 * 43 * 7)
    monkeypatch.setattr(cpu_flash, "FULL_MASK_ELEMENTS", whole)
    monkeypatch.setattr(cpu_flash, "BAND_ROWS", rows)
    monkeypatch.setattr(cpu_flash, "SPLIT_FRACTION", 1 if split else 100)
    if not band:
        monkeypatch.setattr(cpu_flash, "BAND_FRACTION", 10**9)  # the band never fits
    calls = []
    for name in ("_split_forward", "_flat_bias_grad"):
        original = getattr(cpu_flash, name)
        monkeypatch.setattr(cpu_flash, name, lambda *a, f=original, n=name: calls.append(n) or f(*a))
    torch.manual_seed(0)
    length = 43  # blocks of 3 or 4 rows and a shorter last one
    q, k, v = (torch.randn(2, 2, length, 8, requires_grad=True) for _ in range(3))
    values = (2 * torch.randn(2, 2 * radius + 1)).requires_grad_(learned)
    dense = torch.stack(
        [
            torch.stack([values[h, min(max(j - i, -radius), radius) + radius] for j in range(length)])
            for h in range(2)
            for i in range(length)
        ]
    ).view(1, 2, length, length)
    inputs = (q, k, v, values) if learned else (q, k, v)
    assert_attends_as_sdpa(q, k, v, AttentionBias(offsets=values, causal=True), dense, inputs)
    split_taken = split and not whole  # a bias laid out whole is read from that layout
    assert calls == ["_split_forward"] * split_taken + ["_flat_bias_grad"] * (learned and band)


@pytest.mark.parametrize("rows", [4, 5, 6])
def test_the_band_gradient_stays_finite_where_the_bias_dwarfs_its_value_at_offset_0(rows, monkeypatch):
    """A bias whose values within the band are ~100 above its value at offset 0 (every layout takes that value
    off, so exp of the bias alone overflows float32): the band gradient, with a short last block and first
    blocks whose windows would start before key 0, still gives the gradients of SDPA with the bias written
    out (no inf · 0 anywhere)."""
    from poslab.nn.kernels import cpu_flash

    monkeypatch.setattr(cpu_flash, "BLOCK_ELEMENTS", 2 * 2 * 43 * 7)
    monkeypatch.setattr(cpu_flash, "BAND_ROWS", rows)
    calls = []
    original = cpu_flash._flat_bias_grad
    monkeypatch.setattr(cpu_flash, "_flat_bias_grad", lambda *a: calls.append(1) or original(*a))
    torch.manual_seed(0)
    length, radius = 43, 7
    q, k, v = (torch.randn(2, 2, length, 8, requires_grad=True) for _ in range(3))
    values = torch.randn(2, 2 * radius + 1)
    values[:, radius] -= 100.0  # offset 0 far below the rest
    values.requires_grad_(True)
    dense = torch.stack(
        [
            torch.stack([values[h, min(max(j - i, -radius), radius) + radius] for j in range(length)])
            for h in range(2)
            for i in range(length)
        ]
    ).view(1, 2, length, length)
    assert_attends_as_sdpa(q, k, v, AttentionBias(offsets=values, causal=True), dense, (q, k, v, values))
    assert calls == [1]


@pytest.mark.parametrize("whole", [0, 1 << 30], ids=["blocks", "whole"])
@pytest.mark.parametrize("kind", ["linear", "not-linear", "learned-linear"])
def test_a_fixed_linear_bias_puts_its_far_slope_in_a_column(kind, whole, monkeypatch):
    """A fixed bias linear in the offset on the causal side (ALiBi's m·(j − i), some slopes not powers of
    two): past the whole layout its far keys go through one causal call with the slope in two more columns
    of queries and keys. Values and gradients equal SDPA with the bias written out; a bias that is not
    linear, or is learned, keeps the masked blocks."""
    from poslab.nn.kernels import cpu_flash

    monkeypatch.setattr(cpu_flash, "FULL_MASK_ELEMENTS", whole)
    monkeypatch.setattr(cpu_flash, "BLOCK_ELEMENTS", 2 * 2 * 43 * 7)
    monkeypatch.setattr(cpu_flash, "BAND_ROWS", 4)
    monkeypatch.setattr(cpu_flash, "SPLIT_FRACTION", 1)
    monkeypatch.setattr(cpu_flash, "LINEAR_BAND", 5)
    calls = []
    original = cpu_flash._split_forward
    monkeypatch.setattr(cpu_flash, "_split_forward", lambda *a: calls.append(1) or original(*a))
    torch.manual_seed(0)
    length = 43
    q, k, v = (torch.randn(2, 2, length, 8, requires_grad=True) for _ in range(3))
    offsets = torch.arange(-(length - 1), length, dtype=torch.float32)
    values = -torch.tensor([[0.5], [0.3]]) * offsets.abs()  # m·(j − i) for j ≤ i
    if kind == "not-linear":
        values = values + 0.01 * torch.randn_like(values)
    values.requires_grad_(kind == "learned-linear")
    i, j = torch.arange(length)[:, None], torch.arange(length)[None, :]
    dense = values[:, j - i + length - 1][None]
    inputs = (q, k, v, values) if values.requires_grad else (q, k, v)
    assert_attends_as_sdpa(q, k, v, AttentionBias(offsets=values, causal=True), dense, inputs)
    assert bool(calls) == (kind == "linear" and not whole)


def alibi_in_float64(slopes: torch.Tensor, length: int):
    """ALiBi's values m·(j − i) for ``slopes``; random q, k, v and upstream weights ``[1, H, L, 16]``; and the
    float64 reference: the output and the q, k, v gradients."""
    values = -slopes[:, None] * torch.arange(-(length - 1), length).abs()
    q, k, v, weights = (torch.randn(1, len(slopes), length, 16) for _ in range(4))
    i, j = torch.arange(length)[:, None], torch.arange(length)[None, :]
    exact = [t.double().requires_grad_() for t in (q, k, v)]
    dense = values.double()[:, j - i + length - 1].masked_fill(j > i, float("-inf"))[None]
    reference = F.scaled_dot_product_attention(*exact, attn_mask=dense)
    return values, (q, k, v), weights, [reference, *torch.autograd.grad((reference * weights).sum(), exact)]


@pytest.mark.parametrize("heads", [4, 6], ids=["power-of-two-slopes", "other-slopes"])
def test_the_far_slope_column_keeps_float32_accuracy(heads, monkeypatch):
    """ALiBi's slopes over 512 keys, far keys through the slope columns: the error against a float64
    reference stays that of the masked kernel (the slope's products are added before q·k's small terms,
    and logits by the diagonal stay near 0)."""
    from poslab.nn.kernels import cpu_flash

    monkeypatch.setattr(cpu_flash, "FULL_MASK_ELEMENTS", 0)
    monkeypatch.setattr(cpu_flash, "SPLIT_FRACTION", 2)
    calls = []
    original = cpu_flash._split_forward
    monkeypatch.setattr(cpu_flash, "_split_forward", lambda *a: calls.append(a[-1]) or original(*a))
    torch.manual_seed(0)
    length = 512
    slopes = torch.tensor([2.0 ** (-8 * (h + 1) / heads) for h in range(heads)])  # Press et al. 2022, §3
    values, (q, k, v), weights, want = alibi_in_float64(slopes, length)
    errors = {}
    for band in (16, length):  # split, and the masked blocks (no band fits)
        monkeypatch.setattr(cpu_flash, "LINEAR_BAND", band)
        inputs = [t.clone().requires_grad_() for t in (q, k, v)]
        out = attend(*inputs, AttentionBias(offsets=values, causal=True), causal=True, dropout=0.0)
        got = [out, *torch.autograd.grad((out * weights).sum(), inputs)]
        errors[band] = [(a.double() - b).abs().max().item() for a, b in zip(got, want, strict=True)]
    assert calls == [16]
    for split, masked in zip(errors[16], errors[length], strict=True):
        assert split <= 2 * masked + 1e-7, errors


def test_a_split_with_near_blocks_longer_than_the_sequence_still_attends_right(monkeypatch):
    """Near blocks are sized for long sequences (twice the band gradient's rows); where a split is allowed on a
    shorter one they shrink to the sequence."""
    from poslab.nn.kernels import cpu_flash

    monkeypatch.setattr(cpu_flash, "FULL_MASK_ELEMENTS", 0)
    monkeypatch.setattr(cpu_flash, "SPLIT_FRACTION", 1)
    torch.manual_seed(0)
    length, radius = 33, 1
    q, k, v = (torch.randn(1, 2, length, 8, requires_grad=True) for _ in range(3))
    values = torch.randn(2, 2 * radius + 1, requires_grad=True)
    i, j = torch.arange(length)[:, None], torch.arange(length)[None, :]
    dense = values[:, (j - i).clamp(-radius, radius) + radius][None]
    assert_attends_as_sdpa(q, k, v, AttentionBias(offsets=values, causal=True), dense, (q, k, v, values))


def test_float64_attention_with_a_bias_goes_to_sdpa(monkeypatch):
    """The CPU kernel keeps float32 log-sum-exps and sums: float64 inputs take SDPA instead, values and
    gradients exact."""
    from poslab.nn.kernels import cpu_flash

    monkeypatch.setattr(cpu_flash, "causal_bias_attention", None)  # calling it would raise
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 16, 8, dtype=torch.float64, requires_grad=True) for _ in range(3))
    values = torch.randn(2, 31, dtype=torch.float64, requires_grad=True)
    i, j = torch.arange(16)[:, None], torch.arange(16)[None, :]
    assert_attends_as_sdpa(
        q, k, v, AttentionBias(offsets=values, causal=True), values[:, j - i + 15][None], (q, k, v, values)
    )


def test_blocked_fixed_bias_sums_key_gradients_in_float32(monkeypatch):
    """bf16 past the whole layout: the key and value gradients add up one share per block of rows (32 here); they
    are summed in float32, so their error against float64 stays that of the one-call kernel."""
    from poslab.nn.kernels import cpu_flash

    torch.manual_seed(0)
    length, heads = 128, 4
    slopes = torch.tensor([2.0 ** -(2 * h + 2) for h in range(heads)])
    values, (q, k, v), weights, (_, *want) = alibi_in_float64(slopes, length)
    errors = {}
    for whole in (1 << 30, 0):
        monkeypatch.setattr(cpu_flash, "FULL_MASK_ELEMENTS", whole)
        monkeypatch.setattr(cpu_flash, "BLOCK_ELEMENTS", heads * length * 4)  # 4-row blocks
        low = [t.to(torch.bfloat16).requires_grad_() for t in (q, k, v)]
        out = attend(*low, AttentionBias(offsets=values, causal=True), causal=True, dropout=0.0)
        got = torch.autograd.grad((out.float() * weights).sum(), low)
        errors[whole] = [((g.double() - w).norm() / w.norm()).item() for g, w in zip(got, want, strict=True)]
    for blocked, one_call in zip(errors[0], errors[1 << 30], strict=True):
        assert blocked <= 1.3 * one_call, errors


def test_a_bias_is_linear_whatever_constant_it_carries():
    """ALiBi's values with a constant added are still linear; a bias with small bumps is not, however large the
    constant added (the softmax ignores it, so the check does too)."""
    from poslab.nn.kernels.cpu_flash import BiasBlocks

    length = 64
    slopes = torch.tensor([0.5, 0.3, 0.0])
    linear = -slopes[:, None] * torch.arange(-(length - 1), length).abs()
    bumps = 3e-3 * torch.sin(torch.arange(2 * length - 1.0))
    for shift in (0.0, 100.0):  # float32 keeps 100 − 0.5·63 to within 8e−6
        found = BiasBlocks(length, offsets=linear + shift).far_slopes()
        assert found is not None and torch.allclose(found, slopes, atol=1e-4), (shift, found)
        assert BiasBlocks(length, offsets=linear + bumps + shift).far_slopes() is None, shift


def test_flat_bias_in_bfloat16_matches_the_float32_reference(monkeypatch):
    """bf16 through the near / far split (the two softmaxes merged in float32): values and every gradient match
    float32 SDPA with the clamped bias written out, to bf16 precision."""
    from poslab.nn.kernels import cpu_flash

    monkeypatch.setattr(cpu_flash, "BAND_ROWS", 4)
    monkeypatch.setattr(cpu_flash, "SPLIT_FRACTION", 1)
    monkeypatch.setattr(cpu_flash, "FULL_MASK_ELEMENTS", 0)
    torch.manual_seed(0)
    length, radius = 40, 5
    q, k, v = (torch.randn(2, 2, length, 8) for _ in range(3))
    values = torch.randn(2, 2 * radius + 1)
    i, j = torch.arange(length)[:, None], torch.arange(length)[None, :]
    low = [t.clone().to(torch.bfloat16).requires_grad_() for t in (q, k, v, values)]
    out = attend(*low[:3], AttentionBias(offsets=low[3], causal=True), causal=True, dropout=0.0)
    assert out.dtype == torch.bfloat16
    grads = torch.autograd.grad(out.float().square().sum(), low)
    full = [t.clone().requires_grad_() for t in (q, k, v, values)]
    dense = full[3][:, (j - i).clamp(-radius, radius) + radius].masked_fill(j > i, float("-inf"))[None]
    expected = F.scaled_dot_product_attention(*full[:3], attn_mask=dense)
    torch.testing.assert_close(out.float(), expected, atol=0.05, rtol=0.05)
    for got, want in zip(grads, torch.autograd.grad(expected.square().sum(), full), strict=True):
        assert got.dtype == torch.bfloat16
        torch.testing.assert_close(got.float(), want, atol=0.1, rtol=0.05)


@pytest.mark.parametrize("flushed", [False, True], ids=["guarded", "flushed"])
@pytest.mark.parametrize("learned", [False, True], ids=["fixed", "learned"])
def test_offset_kernel_is_exact_where_a_steep_bias_makes_most_probabilities_vanish(learned, flushed, monkeypatch):
    """Far keys of a steep ALiBi-like bias have probabilities far below float32's normal range; the kernel cuts
    them to zero (no denormals) and its gradients still equal SDPA's."""
    from poslab.nn.kernels import cpu_flash

    monkeypatch.setattr(cpu_flash, "FULL_MASK_ELEMENTS", 0)
    monkeypatch.setattr(cpu_flash, "BLOCK_ELEMENTS", 2 * 2 * 64 * 8)
    # flushed: the process says it flushes denormals, so the kernel skips its cut (this process keeps
    # them, which costs time, not accuracy)
    monkeypatch.setattr(poslab.run.denormals, "_flushed", flushed)
    torch.manual_seed(0)
    length = 64
    q, k, v = (torch.randn(2, 2, length, 8, requires_grad=True) for _ in range(3))
    offsets = torch.arange(-(length - 1), length, dtype=torch.float32)
    values = torch.tensor([[8.0], [2.0]]) * offsets  # -8·(i − j): e^-69 is reached 9 keys back
    values.requires_grad_(learned)  # learned: the written-out backward; fixed: ATen's
    i, j = torch.arange(length)[:, None], torch.arange(length)[None, :]
    dense = torch.tensor([8.0, 2.0])[:, None, None] * (j - i).float()
    fast = attend(q, k, v, AttentionBias(offsets=values, causal=True), causal=True, dropout=0.0)
    reference = F.scaled_dot_product_attention(q, k, v, attn_mask=dense.masked_fill(j > i, float("-inf"))[None])
    torch.testing.assert_close(fast, reference)
    grads = torch.autograd.grad(fast.square().sum(), (q, k, v))
    expected = torch.autograd.grad(reference.square().sum(), (q, k, v))
    for got, want in zip(grads, expected, strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


def test_the_pinned_torch_has_the_cpu_flash_ops_with_a_mask():
    """The CPU bias kernel rests on two private ATen ops taking ``attn_mask``; were they gone, attention would
    quietly fall back to SDPA and lose the causal skip (ALiBi 1.4x ``none`` instead of ~1.1x)."""
    from poslab.nn.kernels import cpu_flash

    assert cpu_flash.AVAILABLE


@pytest.mark.parametrize("learned", [False, True])
def test_without_the_cpu_flash_ops_attention_falls_back_to_sdpa(learned, monkeypatch):
    from poslab.nn.kernels import cpu_flash

    monkeypatch.setattr(cpu_flash, "AVAILABLE", False)
    monkeypatch.setattr(cpu_flash, "causal_bias_attention", None)  # calling it would raise
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 9, 8, requires_grad=True) for _ in range(3))
    values = torch.randn(2, 17, requires_grad=learned)
    out = attend(q, k, v, AttentionBias(offsets=values, causal=True), causal=True, dropout=0.0)
    i, j = torch.arange(9)[:, None], torch.arange(9)[None, :]
    dense = values[:, j - i + 8].masked_fill(j > i, float("-inf"))[None]
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=dense))
