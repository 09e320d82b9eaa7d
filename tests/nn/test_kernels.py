"""The attention kernels for additive biases against SDPA with the bias written out.

FlexAttention's forward runs on the CPU (its backward does not, in torch
2.14): its numerics are checked here for every offset-only encoder in the
registry; gradients through it are checked on a GPU by ``make gpu-check``.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from poslab.encoders import available_encoders, build_encoder, encoder_class
from poslab.nn.attention import AttentionBias
from poslab.nn.backbone import Transformer
from poslab.nn.kernels import flex
from poslab.positions import Positions

OFFSET_ONLY = [n for n in available_encoders() if encoder_class(n).uses("relative_bias")]
LENGTH, HEADS, HEAD_DIM = 40, 2, 16


def written_out(encoder, length: int) -> torch.Tensor:
    """``[H, L, L]``: the encoder's bias at every (i, j), one offset j − i at a time."""
    rows = [encoder.relative_bias(torch.tensor([float(j - i) for j in range(length)])) for i in range(length)]
    return torch.stack(rows, dim=1)  # [H, L(i), L(j)]


def trained_like(name: str):
    torch.manual_seed(0)
    enc = build_encoder(name, dim=HEADS * HEAD_DIM, num_heads=HEADS)
    for p in enc.parameters():
        torch.nn.init.normal_(p)  # learned biases start at zero: give them values that can be wrong
    return enc


@pytest.mark.skipif(not flex.AVAILABLE, reason="this torch has no FlexAttention")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", OFFSET_ONLY)
def test_flex_score_mod_equals_sdpa_with_the_bias_written_out(name, dtype):
    enc = trained_like(name)
    q, k, v = (torch.randn(2, HEADS, LENGTH, HEAD_DIM, dtype=dtype) for _ in range(3))
    with torch.no_grad():
        model = Transformer(enc, dim=HEADS * HEAD_DIM, depth=1, num_heads=HEADS, causal=True)
        bias = model.attention_bias(Positions.consecutive(LENGTH), 0, torch.float32, torch.device("cpu"))
        score_mod = bias.score_mod(LENGTH)  # from 2L − 1 values, or 2R + 1 of a bias flat beyond R
        mask = bias.block_mask(LENGTH, LENGTH, q.device)
        got = flex.flex_bias_attention(q, k, v, score_mod, mask, compiled=False)
        future = torch.ones(LENGTH, LENGTH, dtype=torch.bool).triu(1)
        dense = written_out(enc, LENGTH).masked_fill(future, float("-inf"))[None].to(dtype)
        want = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=dense.float())
    tolerance = 1e-5 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(got.float(), want, atol=tolerance, rtol=tolerance)


@pytest.mark.skipif(not flex.AVAILABLE, reason="this torch has no FlexAttention")
def test_flex_dense_score_mod_reads_a_per_sequence_bias():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, HEADS, 12, HEAD_DIM) for _ in range(3))
    dense = torch.randn(2, HEADS, 12, 12)
    with torch.no_grad():
        bias = AttentionBias(dense=dense, causal=False)
        got = flex.flex_bias_attention(q, k, v, bias.score_mod(12), None, compiled=False)
        want = F.scaled_dot_product_attention(q, k, v, attn_mask=dense)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.fixture
def counted_flex(monkeypatch):
    """``flex._compiled()`` as the project builds it, but with a backend that counts the graphs dynamo hands it
    (then runs them as they are); dynamo's caches fresh before and after, pass or fail."""
    from torch._dynamo.testing import CompileCounter

    counter, compile_ = CompileCounter(), torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **options: compile_(fn, backend=counter, **options))
    flex._compiled.cache_clear()
    torch._dynamo.reset()
    yield counter
    flex._compiled.cache_clear()
    torch._dynamo.reset()


@pytest.mark.skipif(not flex.AVAILABLE, reason="this torch has no FlexAttention")
def test_flex_stays_compiled_where_the_caller_forces_eager(counted_flex):
    """The end-of-run evaluations run the model under set_stance("force_eager"); FlexAttention eager would lay
    out every L x L score, so it keeps its compiled (fused) form there."""
    q, k, v = (torch.randn(1, HEADS, 16, HEAD_DIM) for _ in range(3))
    with torch.no_grad(), torch.compiler.set_stance("force_eager"):
        flex.flex_bias_attention(q, k, v, flex.offset_score_mod(torch.zeros(HEADS, 31), 16), None)
    assert counted_flex.frame_count == 1


@pytest.mark.skipif(not flex.AVAILABLE, reason="this torch has no FlexAttention")
def test_flex_compiles_a_few_times_for_many_shapes_and_never_falls_back_to_eager(counted_flex):
    """Twelve (batch, length) shapes as a run meets them, offset and dense biases: compiled as the project
    compiles it, dynamo makes a handful of graphs and stays within its recompile limit, past which
    FlexAttention would run unfused."""
    values = torch.randn(HEADS, 2 * 256)
    shapes = [(8, 64), (8, 96), (4, 64), (8, 128), (2, 200), (8, 160), (3, 64), (8, 256), (5, 100), (8, 48), (7, 72),
              (8, 80)]  # fmt: skip
    with torch.no_grad():
        for batch, length in shapes:
            q, k, v = (torch.randn(batch, HEADS, length, HEAD_DIM) for _ in range(3))
            mask = flex.causal_block_mask(length, length, "cpu")
            offsets = flex.offset_score_mod(values[:, : 2 * length - 1], length)
            dense = flex.dense_score_mod(torch.randn(1, HEADS, length, length))
            for score_mod in (offsets, dense):
                flex.flex_bias_attention(q, k, v, score_mod, mask)
    assert counted_flex.frame_count <= 4 < torch._dynamo.config.recompile_limit  # two per kind of bias


@pytest.mark.skipif(not flex.AVAILABLE, reason="this torch has no FlexAttention")
def test_the_cached_causal_block_mask_is_not_an_inference_tensor():
    """Validation may ask for a shape first (sanity steps, a resumed run): the mask it caches must still be
    usable by a training step, which saves it for the backward pass."""
    flex.causal_block_mask.cache_clear()
    with torch.inference_mode():
        mask = flex.causal_block_mask(256, 256, "cpu")
    assert not mask.kv_num_blocks.is_inference() and not mask.kv_indices.is_inference()
    flex.causal_block_mask.cache_clear()


def test_flex_inputs_are_made_once_per_forward_pass_for_every_layer():
    offsets = AttentionBias(offsets=torch.randn(HEADS, 31), causal=True)
    assert offsets.score_mod(16) is offsets.score_mod(16)
    allowed = AttentionBias(dense=torch.randn(1, HEADS, 16, 16), allowed=torch.ones(16, 16, dtype=torch.bool))
    if flex.AVAILABLE:
        assert allowed.block_mask(16, 16, torch.device("cpu")) is allowed.block_mask(16, 16, torch.device("cpu"))


def test_attend_routes_each_case_to_its_kernel():
    """The dispatch reads device, dtype and shape only, so its CUDA branch is checked here without a GPU."""
    from types import SimpleNamespace

    from poslab.nn import attention
    from poslab.nn.kernels import cpu_flash

    def tensor(device: str, dtype=torch.float32, head_dim: int = 64, length: int = 32):
        return SimpleNamespace(device=torch.device(device), dtype=dtype, shape=(2, 4, length, head_dim))

    offsets = AttentionBias(offsets=torch.zeros(4, 63), causal=True)
    cuda, cpu = tensor("cuda"), tensor("cpu")
    route = attention.kernel_for
    assert route(cuda, cuda, None, True, 0.0) == route(cpu, cpu, None, True, 0.0) == "sdpa"
    assert route(cuda, cuda, offsets, True, 0.0) == ("flex" if flex.AVAILABLE else "sdpa_mask")
    assert route(tensor("cuda", torch.bfloat16), cuda, offsets, True, 0.0) == (
        "flex" if flex.AVAILABLE else "sdpa_mask"
    )
    assert route(tensor("cuda", head_dim=24), cuda, offsets, True, 0.0) == "sdpa_mask"  # not a power of two
    assert route(cuda, cuda, offsets, True, 0.1) == "sdpa_mask"  # dropout on the probabilities
    assert route(cpu, cpu, offsets, True, 0.0) == ("cpu_flash" if cpu_flash.AVAILABLE else "sdpa_mask")
    assert route(tensor("cpu", torch.float64), cpu, offsets, True, 0.0) == "sdpa_mask"
    assert route(cpu, cpu, offsets, False, 0.0) == "sdpa_mask"  # bidirectional: the CPU kernel is causal
    assert route(cpu, tensor("cpu", length=48), offsets, True, 0.0) == "sdpa_mask"  # Lq != Lk
    assert route(cuda, tensor("cuda", length=48), offsets, True, 0.0) == "sdpa_mask"  # offsets are read for Lq = Lk


@pytest.mark.skipif(not flex.AVAILABLE, reason="this torch has no FlexAttention")
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_flex_structure_mask_equals_sdpa_with_the_mask(causal):
    """A boolean structure mask (forecast queries see the past only, …) as a BlockMask, with the causal rule."""
    torch.manual_seed(0)
    length = 24
    q, k, v = (torch.randn(2, HEADS, length, HEAD_DIM) for _ in range(3))
    allowed = torch.rand(length, length) > 0.3
    allowed.fill_diagonal_(True)  # every query keeps a key
    dense = torch.randn(1, HEADS, length, length)
    keep = allowed & torch.ones(length, length, dtype=torch.bool).tril() if causal else allowed
    with torch.no_grad():
        bias = AttentionBias(dense=dense, causal=causal, allowed=allowed)
        got = flex.flex_bias_attention(q, k, v, bias.score_mod(length), bias.block_mask(length, length, q.device),
                                       compiled=False)  # fmt: skip
        want = F.scaled_dot_product_attention(q, k, v, attn_mask=dense.masked_fill(~keep, float("-inf")))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", OFFSET_ONLY)
def test_backbone_keeps_an_offset_bias_as_its_offsets_only_when_the_data_says_consecutive(name):
    """Consecutive positions: 2L − 1 values (up to 2R + 1 for a bias flat beyond R), no L x L tensor; randomized
    ones: the dense bias. Same model output where both apply."""
    enc = trained_like(name)
    torch.manual_seed(1)
    model = Transformer(enc, dim=HEADS * HEAD_DIM, depth=2, num_heads=HEADS, causal=True)
    stated = Positions.consecutive(LENGTH)
    unstated = Positions(steps=torch.arange(LENGTH).expand(2, -1))  # batched: nothing stated
    compact = model.attention_bias(stated, 0, torch.float32, torch.device("cpu"))
    radius = LENGTH - 1 if enc.flat_beyond() is None else min(LENGTH - 1, enc.flat_beyond())
    assert compact.offsets is not None and compact.offsets.shape == (HEADS, 2 * radius + 1) and compact.dense is None
    full = model.attention_bias(unstated, 0, torch.float32, torch.device("cpu"))
    assert full.dense is not None and full.offsets is None
    x = torch.randn(2, LENGTH, HEADS * HEAD_DIM)
    torch.testing.assert_close(model(x, stated), model(x, unstated), atol=1e-5, rtol=1e-5)


FLAT = [n for n in OFFSET_ONLY if build_encoder(n, dim=HEADS * HEAD_DIM, num_heads=HEADS).flat_beyond() is not None]


@pytest.mark.parametrize("name", FLAT)
def test_a_bias_declared_flat_beyond_r_is_flat_beyond_r(name):
    """``flat_beyond() = R`` promises bias(c) = bias(clamp(c, −R, R)) for every integer offset: checked on
    both sides, out to 3R, with non-zero weights."""
    enc = trained_like(name)
    radius = enc.flat_beyond()
    offsets = torch.arange(-3 * radius - 5, 3 * radius + 6, dtype=torch.float32)
    with torch.no_grad():
        torch.testing.assert_close(
            enc.relative_bias(offsets), enc.relative_bias(offsets.clamp(-radius, radius)), rtol=0, atol=0
        )
        assert not torch.equal(enc.relative_bias(offsets[:1] + 3 * radius), enc.relative_bias(offsets[:1]))


@pytest.mark.parametrize("name", FLAT)
def test_a_flat_bias_trains_the_same_as_its_dense_form(name, monkeypatch):
    """Long enough for the near / far split and the band gradient (offsets within R only): the model's output
    and every parameter's gradient equal those of the dense bias through SDPA (nothing stated about the
    positions)."""
    from poslab.nn.kernels import cpu_flash

    monkeypatch.setattr(cpu_flash, "BAND_ROWS", 8)
    monkeypatch.setattr(cpu_flash, "SPLIT_FRACTION", 2)  # near and far keys apart
    monkeypatch.setattr(cpu_flash, "FULL_MASK_ELEMENTS", 0)
    enc = trained_like(name)
    length = 2 * (enc.flat_beyond() + 8) + 10
    torch.manual_seed(1)
    model = Transformer(enc, dim=HEADS * HEAD_DIM, depth=1, num_heads=HEADS, causal=True)
    x = torch.randn(1, length, HEADS * HEAD_DIM)
    calls = []
    for kernel in ("_split_forward", "_flat_bias_grad"):
        original = getattr(cpu_flash, kernel)
        monkeypatch.setattr(cpu_flash, kernel, lambda *a, f=original, n=kernel: calls.append(n) or f(*a))
    results = []
    for pos in (Positions.consecutive(length), Positions(steps=torch.arange(length)[None])):
        if len(results) == 1:  # the reference: the dense bias through SDPA's mask, none of this kernel
            monkeypatch.setattr(cpu_flash, "AVAILABLE", False)
        out = model(x, pos)
        weights = torch.linspace(-1, 1, out.numel()).view_as(out)
        results.append((out, torch.autograd.grad((out * weights).sum(), list(model.parameters()))))
    assert calls == ["_split_forward", "_flat_bias_grad"]  # the stated positions only
    (out, grads), (want_out, want_grads) = results
    torch.testing.assert_close(out, want_out, atol=1e-5, rtol=1e-5)
    for got, want in zip(grads, want_grads, strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


def test_structure_mask_without_a_bias_keeps_the_causal_rule():
    """A structure mask and the causal flag, no additive bias: both apply (neither is dropped)."""
    allowed = torch.ones(4, 4, dtype=torch.bool)
    allowed[:, 0] = False
    mask = AttentionBias(causal=True, allowed=allowed).masked(4, 4, torch.device("cpu"))
    expected = torch.ones(4, 4, dtype=torch.bool).tril() & allowed
    assert torch.equal(mask, expected)


@pytest.mark.skipif(not flex.AVAILABLE, reason="this torch has no FlexAttention")
def test_flex_takes_tiles_that_fit_hopper_on_cuda_and_its_own_elsewhere(monkeypatch):
    """Inductor built no kernel from FlexAttention's Hopper defaults at head size 64 (a 128 × 32 query × key
    tile in 3 stages: 240 KiB of shared memory on a 227 KiB H200). On CUDA the tiles are smaller, and
    divide the BlockMask's 128-wide blocks (FlexAttention refuses others); the CPU keeps its own."""
    from types import SimpleNamespace

    tiles = flex.kernel_options(SimpleNamespace(is_cuda=True))
    assert tiles["BLOCK_M"] * tiles["BLOCK_N"] * tiles["num_stages"] < 128 * 32 * 3
    assert 128 % tiles["BLOCK_M"] == 0 and 128 % tiles["BLOCK_N"] == 0
    seen = []

    def recorded(q, k, v, score_mod=None, block_mask=None, kernel_options=None):
        seen.append(kernel_options)
        return q

    monkeypatch.setattr(flex, "flex_attention", recorded)
    q = torch.randn(1, HEADS, 8, HEAD_DIM)
    flex.flex_bias_attention(q, q, q, None, None, compiled=False)
    assert seen == [None]
