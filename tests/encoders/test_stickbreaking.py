"""``stickbreaking`` against Tan et al. 2025 (eq. 3-4): A_ij = σ(z_ij) Π_{j<k<i} (1 − σ(z_ik)), written out one
weight at a time and in the reference's matrix form, and in what each layer's attention computes."""

from __future__ import annotations

import math

import pytest
import torch

from poslab.encoders import build_encoder, build_encoder_in_context
from poslab.positions import Positions
from tests.encoders.test_attention_computes import DIM, HEADS, LENGTH, model_with, recorded_attention


def sigmoid(value: float) -> float:
    return 1.0 / (1.0 + math.exp(-value))


def stick_weights(logits: torch.Tensor, attend_current: bool, remainder: bool, bidirectional: bool) -> torch.Tensor:
    """The weights one at a time: keys nearer the query break the stick first, on each side of it (the
    query's own token first on the left when it may attend to itself); each side half the stick when
    bidirectional; what is left over to the query's own token."""
    batch, heads, length, _ = logits.shape
    out = torch.zeros(batch, heads, length, length, dtype=torch.float64)
    for b in range(batch):
        for h in range(heads):
            for i in range(length):
                z = [float(v) for v in logits[b, h, i]]
                allowed = [j for j in range(length) if z[j] != float("-inf") and (attend_current or j != i)]
                left = sorted((j for j in allowed if j <= i), reverse=True)  # nearest first
                right = sorted(j for j in allowed if j > i) if bidirectional else []
                share = 0.5 if bidirectional else 1.0
                for side in (left, right):
                    rest = 1.0
                    for j in side:
                        out[b, h, i, j] = share * rest * sigmoid(z[j])
                        rest *= 1.0 - sigmoid(z[j])
                if remainder:
                    out[b, h, i, i] += 1.0 - out[b, h, i].sum()
    return out


def causal_logits(length: int = 7, seed: int = 0) -> torch.Tensor:
    torch.manual_seed(seed)
    logits = 2.0 * torch.randn(2, HEADS, length, length)
    return logits.masked_fill(torch.ones(length, length, dtype=torch.bool).triu(1), float("-inf"))


@pytest.mark.parametrize("attend_current", [False, True])
@pytest.mark.parametrize("remainder", [True, False])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_the_weights_are_the_stick_broken_from_the_query_outward(attend_current, remainder, bidirectional):
    encoder = build_encoder(
        "stickbreaking",
        dim=DIM,
        num_heads=HEADS,
        attend_current=attend_current,
        remainder=remainder,
        bidirectional=bidirectional,
    )
    logits = causal_logits() if not bidirectional else 2.0 * torch.randn(2, HEADS, 7, 7)
    expected = stick_weights(logits, attend_current, remainder, bidirectional)
    torch.testing.assert_close(encoder.attention_weights(logits).double(), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("attend_current", [False, True])
def test_the_weights_match_the_references_matrix_form(attend_current):
    """sb_ref.py: log A = logsigmoid(z) (masked at −1e5) + Σ_k logsigmoid(−z_ik)·[k > j] over the allowed k, the
    remainder added to the query's own value (its tests' ``o + rem · v``)."""
    length = 9
    logits = causal_logits(length, seed=2)
    z = logits.masked_fill(torch.isinf(logits), 0.0)  # the reference masks by a boolean, not by −inf logits
    mask = torch.ones(length, length, dtype=torch.bool).triu(1 if attend_current else 0)
    cumulative = torch.ones(length, length).tril(-1)
    log_z = torch.nn.functional.logsigmoid(z).masked_fill(mask, -1e5)
    log_beta = torch.nn.functional.logsigmoid(-z).masked_fill(mask, 0.0)
    attention = (log_z + torch.einsum("bhij,jk->bhik", log_beta, cumulative)).exp()
    reference = attention + torch.diag_embed(1.0 - attention.sum(-1))
    encoder = build_encoder("stickbreaking", dim=DIM, num_heads=HEADS, attend_current=attend_current)
    torch.testing.assert_close(encoder.attention_weights(logits), reference, rtol=1e-5, atol=1e-6)


def test_built_without_a_direction_the_mask_decides():
    """No ``bidirectional`` given (a notebook, a test): causal logits get one stick, logits with later keys
    visible get two half sticks."""
    encoder = build_encoder("stickbreaking", dim=DIM, num_heads=HEADS)
    causal = causal_logits(6)
    expected = stick_weights(causal, False, True, False)
    torch.testing.assert_close(encoder.attention_weights(causal).double(), expected, rtol=1e-5, atol=1e-6)
    both = 2.0 * torch.randn(2, HEADS, 6, 6)
    expected = stick_weights(both, False, True, True)
    torch.testing.assert_close(encoder.attention_weights(both).double(), expected, rtol=1e-5, atol=1e-6)


def test_a_near_key_that_takes_the_whole_stick_leaves_nothing_further_back():
    """Recency without positions: a key with σ(z) = 1 just before the query hides every earlier key, whatever
    their logits."""
    logits = causal_logits(6)
    logits[..., 5, 4] = 60.0
    encoder = build_encoder("stickbreaking", dim=DIM, num_heads=HEADS, remainder=False)
    weights = encoder.attention_weights(logits)
    assert torch.allclose(weights[..., 5, 4], torch.ones(()))
    assert weights[..., 5, :4].abs().max() < 1e-12


def test_weights_are_a_partial_distribution_that_the_remainder_completes():
    logits = causal_logits(8, seed=4)
    bare = build_encoder("stickbreaking", dim=DIM, num_heads=HEADS, remainder=False).attention_weights(logits)
    full = build_encoder("stickbreaking", dim=DIM, num_heads=HEADS).attention_weights(logits)
    assert (bare >= 0).all() and (bare.sum(-1) <= 1 + 1e-6).all()
    torch.testing.assert_close(full.sum(-1), torch.ones(2, HEADS, 8))
    assert torch.equal(bare[..., 0, :], torch.zeros(2, HEADS, 8))  # the first token has no earlier key
    assert torch.allclose(full[..., 0, 0], torch.ones(()))


@pytest.mark.parametrize("causal", [True, False])
def test_each_layer_averages_its_values_with_the_stick_breaking_weights(causal):
    """What attention computes: the layer's own q·k/√d, masked causally or not, turned into weights by the
    equation above (no softmax anywhere), times its values."""
    encoder = build_encoder_in_context(
        "stickbreaking", dim=DIM, num_heads=HEADS, options={}, context={"bidirectional": not causal}
    )
    model = model_with(encoder, depth=2, causal=causal)
    torch.manual_seed(1)
    x = torch.randn(2, LENGTH, DIM)
    for index, ((inputs, out), block) in enumerate(
        zip(recorded_attention(model, x, Positions(steps=torch.arange(LENGTH))), model.blocks, strict=True)
    ):
        attn = block.attn
        h = inputs.double()
        qkv = h @ attn.qkv.weight.detach().double().T + attn.qkv.bias.detach().double()
        q, k, v = qkv.view(2, LENGTH, 3, HEADS, DIM // HEADS).permute(2, 0, 3, 1, 4)
        logits = q @ k.transpose(-1, -2) / math.sqrt(DIM // HEADS)
        if causal:
            logits = logits.masked_fill(torch.ones(LENGTH, LENGTH, dtype=torch.bool).triu(1), float("-inf"))
        weights = stick_weights(logits, attend_current=False, remainder=True, bidirectional=not causal)
        mixed = (weights @ v).transpose(1, 2).reshape(2, LENGTH, DIM)
        expected = mixed @ attn.proj.weight.detach().double().T + attn.proj.bias.detach().double()
        torch.testing.assert_close(out.double(), expected, rtol=2e-4, atol=2e-5, msg=f"layer {index}")


def test_it_chains_with_an_encoder_that_rotates_but_not_with_another_that_replaces_the_softmax():
    from poslab.encoders.composite import CompositeEncoder
    from poslab.errors import ConfigError

    members = {
        "rope": build_encoder("rope", dim=DIM, num_heads=HEADS),
        "stickbreaking": build_encoder("stickbreaking", dim=DIM, num_heads=HEADS),
    }
    both = CompositeEncoder(DIM, HEADS, members)
    assert both.uses("rotate") and both.uses("attention_weights")
    logits = causal_logits()
    assert torch.equal(both.attention_weights(logits), members["stickbreaking"].attention_weights(logits))
    twice = {"a": members["stickbreaking"], "b": build_encoder("stickbreaking", dim=DIM, num_heads=HEADS)}
    with pytest.raises(ConfigError, match="a and b both replace attention_weights"):
        CompositeEncoder(DIM, HEADS, twice)
