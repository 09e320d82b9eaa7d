"""``fire`` against its paper: the bias written out from eq. (4)-(6) with a known f_θ, and the interpolation's range."""

from __future__ import annotations

import math

import pytest
import torch

from poslab.encoders import build_encoder


def _linear_heads(enc, width: int) -> None:
    """Set f_θ(x) = (h + 1)·x for head h: the first layer copies x (x ≥ 0 passes the ReLU), the second scales."""
    with torch.no_grad():
        enc.mlp[0].weight.fill_(1.0)
        enc.mlp[0].bias.zero_()
        enc.mlp[2].weight.copy_(
            torch.arange(1, enc.num_heads + 1, dtype=torch.float32)[:, None].expand(-1, width) / width
        )
        enc.mlp[2].bias.zero_()


def test_fire_golden_values():
    """Li et al. 2023: b(i, j) = f(log(c|i−j| + 1) / (log(c·max(L, i) + 1) + eps)), here with c = 0.5, L = 3."""
    enc = build_encoder("fire", dim=8, num_heads=2, mlp_width=4, init_c=0.5, threshold=3.0)
    _linear_heads(enc, 4)
    bias = enc.attention_bias(torch.arange(6), torch.arange(6))
    assert bias.shape == (2, 6, 6)
    for i, j in ((1, 0), (2, 0), (5, 1), (5, 5), (4, 2)):
        normalised = math.log(0.5 * (i - j) + 1) / (math.log(0.5 * max(3, i) + 1) + 1e-6)
        assert bias[0, i, j].item() == pytest.approx(normalised, rel=1e-5, abs=1e-6)
        assert bias[1, i, j].item() == pytest.approx(2 * normalised, rel=1e-5, abs=1e-6)


def test_progressive_interpolation_keeps_every_visible_distance_in_0_1_at_any_length():
    enc = build_encoder("fire", dim=8, num_heads=2, threshold=16.0)
    for length in (8, 64, 4096):
        steps = torch.arange(length)
        normalised = enc.normalized_distance(steps, steps)
        visible = torch.ones(length, length).tril().bool()  # keys at or before the query
        assert normalised[visible].min() >= 0 and normalised[visible].max() <= 1
        if length > 16:  # a query past L: its farthest key sits at ~1
            assert normalised[length - 1, 0] > 0.99


def test_fire_learns_c_the_threshold_and_the_mlp():
    enc = build_encoder("fire", dim=8, num_heads=2)
    bias = enc.attention_bias(torch.arange(5).float()[None], torch.arange(5).float()[None])  # batched positions
    assert bias.shape == (1, 2, 5, 5)
    bias.square().sum().backward()
    assert enc.c.grad is not None and enc.mlp[0].weight.grad.abs().sum() > 0
    names = {n for n, p in enc.named_parameters() if p.requires_grad}
    assert {"c", "threshold_scale", "mlp.0.weight", "mlp.2.weight"} <= names


@pytest.mark.parametrize("batched", [False, True])
def test_the_bias_in_chunks_of_rows_equals_it_whole_with_the_same_gradients(batched, monkeypatch):
    """Past ``CHUNK_ELEMENTS`` the bias is made a few query rows at a time (each chunk's MLP recomputed in the
    backward, not kept): values and every parameter's gradient equal the bias made whole, with and without
    gradients, batched positions too, and it still traces as one graph (``torch.compile``)."""
    from poslab.encoders import fire

    torch.manual_seed(0)
    enc = build_encoder("fire", dim=8, num_heads=2, mlp_width=4, threshold=6.0)
    steps = torch.arange(13.0)
    q_pos = k_pos = steps[None].expand(2, -1) if batched else steps
    weights = torch.randn((2, 2, 13, 13) if batched else (2, 13, 13))
    results = []
    for chunk in (10**9, 3 * 13 * 4):  # whole; 3 rows a chunk (and a short last one)
        monkeypatch.setattr(fire, "CHUNK_ELEMENTS", chunk)
        enc.zero_grad()
        bias = enc.attention_bias(q_pos, k_pos)
        (bias * weights).sum().backward()
        with torch.no_grad():
            torch.testing.assert_close(enc.attention_bias(q_pos, k_pos), bias, rtol=1e-6, atol=1e-7)
        results.append((bias.detach(), [p.grad.clone() for p in enc.parameters()]))
    (whole, whole_grads), (chunked, chunked_grads) = results
    torch.testing.assert_close(chunked, whole, rtol=1e-6, atol=1e-7)  # the matmuls' batch shapes differ
    for got, want in zip(chunked_grads, whole_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    compiled = torch.compile(enc.attention_bias, fullgraph=True, backend="eager")
    torch.testing.assert_close(compiled(q_pos, k_pos), whole, rtol=1e-6, atol=1e-7)
