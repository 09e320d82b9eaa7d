"""Dual Chunk Attention (An et al. 2024; reference: HKUNLP/ChunkLlama ``chunkllama_attn_replace.py``): the
attention of ``rope``'s ``dca`` extension against the reference's forward pass written out here — its three
position tables, its three attention calls per chunk and their merge by log-sum-exp."""

from __future__ import annotations

import math

import pytest
import torch

from poslab.encoders import build_encoder


def rotate_half(x):
    return torch.cat((-x[..., x.shape[-1] // 2 :], x[..., : x.shape[-1] // 2]), dim=-1)


def turned(x, positions, inv_freq):
    """``apply_rotary_pos_emb`` with ``emb = cat(freqs, freqs)`` at ``positions`` (float64)."""
    emb = torch.outer(positions.double(), inv_freq)
    emb = torch.cat((emb, emb), dim=-1)
    return x * emb.cos() + rotate_half(x) * emb.sin()


def attend(q, k, v, causal):
    """``do_flash_attn``: (output, log-sum-exp of the scaled scores)."""
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        scores = scores.masked_fill(torch.ones_like(scores, dtype=torch.bool).triu(1), float("-inf"))
    return scores.softmax(-1) @ v, scores.logsumexp(-1)


def reference(q, k, v, inv_freq, pretraining_length):
    chunk_size = pretraining_length * 3 // 4
    chunk_len = chunk_size - pretraining_length // 16
    length = q.shape[-2]
    q_t = torch.arange(chunk_len).double()
    qc_t = (q_t + chunk_len).clamp(max=chunk_size)
    position_ids = torch.arange(length) % chunk_len
    keys = turned(k, position_ids.double(), inv_freq)
    results = [attend(turned(q[..., :chunk_len, :], q_t[position_ids[:chunk_len]], inv_freq),
                      keys[..., :chunk_len, :], v[..., :chunk_len, :], True)[0]]  # fmt: skip
    begin = chunk_len
    while begin < length:
        end = min(begin + chunk_len, length)
        ids = position_ids[begin:end]
        parts = [attend(turned(q[..., begin:end, :], q_t[ids], inv_freq), keys[..., begin:end, :],
                        v[..., begin:end, :], True)]  # fmt: skip
        parts.append(attend(turned(q[..., begin:end, :], qc_t[ids], inv_freq), keys[..., begin - chunk_len : begin, :],
                            v[..., begin - chunk_len : begin, :], False))  # fmt: skip
        if begin - chunk_len > 0:
            inter = qc_t[chunk_len - 1].repeat(end - begin)
            parts.append(attend(turned(q[..., begin:end, :], inter, inv_freq), keys[..., : begin - chunk_len, :],
                                v[..., : begin - chunk_len, :], False))  # fmt: skip
        lse = torch.stack([p[1] for p in parts]).exp()
        lse = lse / lse.sum(0)
        results.append((torch.stack([p[0] for p in parts]) * lse[..., None]).sum(0))
        begin = end
    return torch.cat(results, dim=-2)


@pytest.mark.parametrize("length", [40, 64, 150])
def test_attention_is_the_references_three_parts_merged(length):
    """Training context 64: chunks of 48 − 4 = 44 tokens; 150 tokens span four chunks, so every query of the
    last sees its own chunk, the one before and two earlier ones."""
    torch.manual_seed(0)
    rope = build_encoder("rope", dim=32, num_heads=2, max_len=64)
    dca = rope.extended("dca", 8.0)
    q, k, v = (torch.randn(1, 2, length, 16, dtype=torch.float64) for _ in range(3))
    logits = dca.attention_logits(q, k, None, 0).double()
    logits = logits.masked_fill(torch.ones(length, length, dtype=torch.bool).triu(1), float("-inf"))
    got = logits.softmax(-1) @ v
    inv_freq = 1.0 / 10000.0 ** (torch.arange(0, 16, 2).double() / 16)
    torch.testing.assert_close(got, reference(q, k, v, inv_freq, 64), atol=1e-5, rtol=1e-5)


def test_within_one_chunk_it_is_rope():
    torch.manual_seed(0)
    rope = build_encoder("rope", dim=32, num_heads=2, max_len=64)
    q, k = torch.randn(1, 2, 44, 16), torch.randn(1, 2, 44, 16)
    positions = torch.arange(44)
    plain = rope.rotate(q, positions) @ rope.rotate(k, positions).transpose(-1, -2) / 4.0
    torch.testing.assert_close(rope.extended("dca", 2.0).attention_logits(q, k, None, 0), plain, atol=1e-5, rtol=1e-5)


def test_no_offset_exceeds_the_chunk_size():
    dca = build_encoder("rope", dim=32, num_heads=2, max_len=64).extended("dca", 8.0)
    positions, behind = dca.relations(512, 512)
    query = positions.gather(1, behind)  # [Lq, Lk]: where query i reads key j
    offsets = (query - torch.arange(512)[None, :] % dca.chunk).tril()
    assert offsets.max().item() == dca.chunk_size == 48 and offsets.min().item() == 0
