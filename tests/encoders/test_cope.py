"""``cope`` against Golovneva et al. 2024: the paper's listing, written out here, and eq. 3-5's limits."""

from __future__ import annotations

import torch

from poslab.encoders import build_encoder


def listing(query, attn_logits, pos_emb, npos_max):
    """The paper's ``CoPE.forward`` (§3, code listing), causal: flip-cumsum-flip of the gates, clamp,
    gather at the ceiling and the floor, interpolate."""
    gates = torch.sigmoid(attn_logits)
    pos = gates.flip(-1).cumsum(dim=-1).flip(-1)
    pos = pos.clamp(max=npos_max - 1)
    pos_ceil, pos_floor = pos.ceil().long(), pos.floor().long()
    logits_int = torch.matmul(query, pos_emb)
    logits_ceil, logits_floor = logits_int.gather(-1, pos_ceil), logits_int.gather(-1, pos_floor)
    w = pos - pos_floor
    return logits_ceil * w + logits_floor * (1 - w)


def causal_logits(q, k):
    logits = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    future = torch.ones(q.shape[-2], k.shape[-2]).triu(1).bool()
    return logits.masked_fill(future, float("-inf"))


def test_the_bias_is_the_papers_listing():
    torch.manual_seed(0)
    enc = build_encoder("cope", dim=16, num_heads=2, npos_max=4)
    with torch.no_grad():
        enc.pos_emb.normal_()
    q, k = torch.randn(2, 1, 2, 9, 8)
    logits = causal_logits(q, k)
    got = enc.content_bias(q, k, logits)
    future = torch.ones(9, 9).triu(1).bool()
    expected = listing(q, logits, enc.pos_emb.detach(), 4)
    torch.testing.assert_close(got.masked_fill(future, 0), expected.masked_fill(future, 0))
    assert enc.positions(logits).max() == 3  # clamped at P − 1


def test_with_every_gate_open_positions_are_the_ordinary_relative_ones():
    """g = 1 everywhere before the query: p_ij = i − j + 1, and the bias is q_i · e[i − j + 1]."""
    enc = build_encoder("cope", dim=8, num_heads=1, npos_max=16)
    with torch.no_grad():
        enc.pos_emb.normal_()
    q, k = torch.randn(1, 1, 7, 8), torch.randn(1, 1, 7, 8)
    logits = torch.full((1, 1, 7, 7), 40.0).masked_fill(torch.ones(7, 7).triu(1).bool(), float("-inf"))
    rows, cols = torch.meshgrid(torch.arange(7), torch.arange(7), indexing="ij")
    below = cols <= rows
    torch.testing.assert_close(enc.positions(logits)[0, 0][below], (rows - cols + 1)[below].float())
    bias = enc.content_bias(q, k, logits)[0, 0]
    for i in range(7):
        for j in range(i + 1):
            torch.testing.assert_close(bias[i, j], q[0, 0, i] @ enc.pos_emb[:, i - j + 1].detach())


def test_closed_gates_count_nothing_and_bidirectional_counts_both_sides():
    enc = build_encoder("cope", dim=8, num_heads=1, npos_max=16)
    shut = torch.full((1, 1, 5, 5), -40.0)
    assert enc.positions(shut).abs().max() < 1e-6
    open_ = torch.full((1, 1, 5, 5), 40.0)  # no mask: keys after the query count too, symmetrically
    rows, cols = torch.meshgrid(torch.arange(5), torch.arange(5), indexing="ij")
    torch.testing.assert_close(enc.positions(open_)[0, 0], ((rows - cols).abs() + 1).float())


def test_the_gradient_reaches_the_table_and_the_queries():
    enc = build_encoder("cope", dim=8, num_heads=1)
    with torch.no_grad():
        enc.pos_emb.normal_()
    q = torch.randn(1, 1, 6, 8, requires_grad=True)
    k = torch.randn(1, 1, 6, 8, requires_grad=True)
    enc.content_bias(q, k, causal_logits(q, k)).masked_fill(torch.ones(6, 6).triu(1).bool(), 0).sum().backward()
    assert enc.pos_emb.grad.abs().sum() > 0 and q.grad.abs().sum() > 0 and k.grad.abs().sum() > 0


def test_a_count_a_parallel_scan_rounds_below_zero_stays_inside_the_table(monkeypatch):
    """On a GPU the cumulative sums are parallel scans: a count that is 0 may come out as −1 ulp, and its
    floor (−1) would gather before the table. Constructed here by perturbing the exact counts as such a scan
    does: the positions stay in [0, npos_max − 1] and the bias is the unperturbed one."""
    import poslab.encoders.cope as cope

    torch.manual_seed(0)
    enc = build_encoder("cope", dim=8, num_heads=2, npos_max=4)
    with torch.no_grad():
        enc.pos_emb.normal_()
    q = torch.randn(1, 2, 5, 4)
    logits = torch.full((1, 2, 5, 5), -1e4).tril()  # gates ~0 below the diagonal, 1 above: counts of 0 abound
    logits = logits.masked_fill(torch.ones(5, 5, dtype=torch.bool).triu(1), float("-inf"))
    exact = enc.content_bias(q, q, logits)
    real = cope.gate_counts
    monkeypatch.setattr(cope, "gate_counts", lambda gates: real(gates) - 1e-7)  # a scan's rounding
    assert enc.positions(logits).min() == 0
    torch.testing.assert_close(enc.content_bias(q, q, logits), exact, atol=1e-5, rtol=0)
