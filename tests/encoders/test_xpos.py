"""``xpos`` against Sun et al. 2022 (eq. 5-6): the score of q at n and k at m, written out per rotation pair."""

from __future__ import annotations

import math

import pytest
import torch

from poslab.encoders import build_encoder


def xpos_score(q, k, n, m, base=10000.0, scale_base=512.0, gamma=0.4):
    """Σ_i ζ_i^((n−m)/B) · Re[(q_2i + i·q_2i+1) · conj(k_2i + i·k_2i+1) · e^{i(n−m)θ_i}], adjacent pairs."""
    d = len(q)
    total = 0.0
    for i in range(d // 2):
        theta = base ** (-2 * i / d)
        zeta = (2 * i / d + gamma) / (1 + gamma)
        qc, kc = complex(q[2 * i], q[2 * i + 1]), complex(k[2 * i], k[2 * i + 1])
        total += (
            zeta ** ((n - m) / scale_base)
            * (qc * kc.conjugate() * complex(math.cos((n - m) * theta), math.sin((n - m) * theta))).real
        )
    return total  # fmt: skip


def scores(enc, q, k, positions):
    return (enc.rotate_query(q, positions) @ enc.rotate_key(k, positions).transpose(-1, -2))[0, 0]


def test_scores_are_the_papers_with_the_decay_term():
    enc = build_encoder("xpos", dim=8, num_heads=1, base=100.0, scale_base=8.0)
    torch.manual_seed(0)
    q, k = torch.randn(1, 1, 6, 8), torch.randn(1, 1, 6, 8)
    positions = torch.arange(6)
    got = scores(enc, q, k, positions)
    for n in range(6):
        for m in range(6):
            golden = xpos_score(q[0, 0, n].tolist(), k[0, 0, m].tolist(), n, m, base=100.0, scale_base=8.0)
            assert got[n, m].item() == pytest.approx(golden, rel=1e-4, abs=1e-5)


def test_scores_depend_only_on_the_offset_and_the_scale_cancels_at_zero_offset():
    enc = build_encoder("xpos", dim=16, num_heads=2, scale_base=16.0)
    torch.manual_seed(1)
    q = torch.randn(1, 2, 1, 8).expand(1, 2, 10, 8)  # the same query and key content at every position
    k = torch.randn(1, 2, 1, 8).expand(1, 2, 10, 8)
    near, far = scores(enc, q, k, torch.arange(10)), scores(enc, q, k, torch.arange(10) + 1000)
    torch.testing.assert_close(far, near, rtol=1e-4, atol=1e-4)
    for offset in range(1, 4):  # every pair (n, n − offset) scores the same
        diagonal = near.diagonal(-offset)
        torch.testing.assert_close(diagonal, diagonal[:1].expand_as(diagonal), rtol=1e-4, atol=1e-4)
    plain = (q[0, 0] * k[0, 0]).sum(-1)
    torch.testing.assert_close(near.diagonal(), plain, rtol=1e-5, atol=1e-5)  # m = n: rotation and scale cancel


def test_queries_and_keys_are_scaled_apart_and_the_rotation_alone_keeps_norms():
    """The decay itself is in the golden values above; here: ``rotate`` is RoPE's rotation, the scales differ."""
    enc = build_encoder("xpos", dim=16, num_heads=2, scale_base=4.0)
    x, positions = torch.randn(1, 2, 9, 8), torch.arange(9)
    queries, keys = enc.rotate_query(x, positions), enc.rotate_key(x, positions)
    torch.testing.assert_close(enc.rotate(x, positions).norm(dim=-1), x.norm(dim=-1))
    assert not torch.allclose(queries, keys)
