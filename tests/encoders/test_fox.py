"""``fox`` against Lin et al. 2025 (eq. 4-6): the logit of query i for key j gains Σ_{l=j+1..i} log f_l,
f_l = σ(w·x_l + b) from the layer's own input, in what each layer's attention computes."""

from __future__ import annotations

import math

import pytest
import torch

from poslab.encoders import build_encoder, build_encoder_in_context
from poslab.positions import Positions
from tests.encoders.test_attention_computes import (
    DIM,
    HEADS,
    LENGTH,
    attention_from_scores,
    model_with,
    plain_scores,
    recorded_attention,
    rotary_scores,
)


def forget_bias(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, causal: bool) -> torch.Tensor:
    """Eq. 6 one logit at a time: Σ log σ(w_h·x_l + b_h) over the tokens l after the earlier of i, j up to the
    later one (causal: l = j+1 … i)."""
    log_f = torch.nn.functional.logsigmoid(x.double() @ weight.double().T + bias.double())  # [B, L, H]
    batch, length, heads = log_f.shape
    out = torch.zeros(batch, heads, length, length, dtype=torch.float64)
    for i in range(length):
        for j in range(length):
            if causal and j > i:
                continue
            low, high = min(i, j), max(i, j)
            out[:, :, i, j] = log_f[:, low + 1 : high + 1, :].sum(1)
    return out


def check_fox_layers(model, encoder, causal: bool, base_scores=plain_scores) -> None:
    torch.manual_seed(1)
    x = torch.randn(2, LENGTH, DIM)
    pos = Positions(steps=torch.arange(LENGTH))
    for index, ((inputs, out), block) in enumerate(zip(recorded_attention(model, x, pos), model.blocks, strict=True)):
        gate = encoder.gates[index if len(encoder.gates) > 1 else 0]  # one gate shared by every layer: depth None
        extra = forget_bias(inputs, gate.weight.detach(), gate.bias.detach(), causal)
        expected = attention_from_scores(block.attn, inputs, lambda q, k, d=extra: base_scores(q, k) + d, causal)
        torch.testing.assert_close(out.double(), expected, rtol=2e-4, atol=2e-5, msg=f"layer {index}")


def randomised(encoder):
    torch.manual_seed(3)
    with torch.no_grad():
        for gate in encoder.gates:
            gate.weight.normal_(std=0.5)
            gate.bias.normal_(std=1.0)
    return encoder


@pytest.mark.parametrize("causal", [True, False])
def test_each_layer_decays_by_its_own_gates_of_its_own_input(causal):
    encoder = randomised(build_encoder_in_context("fox", dim=DIM, num_heads=HEADS, options={}, context={"depth": 3}))
    assert len(encoder.gates) == 3 and not torch.equal(encoder.gates[0].weight, encoder.gates[1].weight)
    check_fox_layers(model_with(encoder, depth=3, causal=causal), encoder, causal)


def test_without_a_depth_one_gate_serves_every_layer_on_that_layers_input():
    encoder = randomised(build_encoder("fox", dim=DIM, num_heads=HEADS))
    assert len(encoder.gates) == 1
    check_fox_layers(model_with(encoder, depth=3, causal=True), encoder, True)


def test_fox_with_rope_adds_the_decay_to_ropes_scores():
    options = {"rope": {"base": 100.0, "layout": "interleaved"}}
    composite = build_encoder_in_context("rope+fox", dim=DIM, num_heads=HEADS, options=options, context={"depth": 2})
    fox = randomised(composite.members["fox"])
    check_fox_layers(model_with(composite, depth=2), fox, True, lambda q, k: rotary_scores(q, k, 100.0, "interleaved"))


def test_gates_as_constructed_follow_the_reference_init():
    """One Linear(dim, heads) per layer, weights N(0, 0.02), biases 0: at the start f ≈ σ(0) = 1/2."""
    torch.manual_seed(0)
    encoder = build_encoder("fox", dim=256, num_heads=4, depth=2)
    weights = torch.cat([g.weight.flatten() for g in encoder.gates])
    assert weights.std().item() == pytest.approx(0.02, rel=0.1) and abs(weights.mean().item()) < 0.002
    assert all(torch.equal(g.bias, torch.zeros(4)) for g in encoder.gates)
    log_f = encoder.log_gates(torch.zeros(1, 5, 256), 0)
    torch.testing.assert_close(log_f, torch.full((1, 4, 5), math.log(0.5)))


def test_open_gates_are_plain_attention_and_closed_gates_keep_only_the_token_itself():
    """f → 1 (bias +30): no decay, NoPE's attention; f → 0 (bias −30): each query sees only itself."""
    encoder = build_encoder("fox", dim=DIM, num_heads=HEADS, depth=1)
    x = torch.randn(1, 6, DIM)
    with torch.no_grad():
        encoder.gates[0].weight.zero_()
        encoder.gates[0].bias.fill_(30.0)
        assert encoder.input_bias(x, 0).abs().max() < 1e-10
        encoder.gates[0].bias.fill_(-30.0)
        bias = encoder.input_bias(x, 0)
    assert torch.equal(bias.diagonal(dim1=-2, dim2=-1), torch.zeros(1, HEADS, 6))
    distance = (torch.arange(6)[:, None] - torch.arange(6)[None, :]).abs().double()
    torch.testing.assert_close(bias.double(), (-30.0 * distance).expand_as(bias), rtol=1e-5, atol=1e-4)  # f^|i−j|
