"""``path`` against Yang et al. 2025 (eq. 2-3): z_ij = q_iᵀ H_i ⋯ H_{j+1} k_j / √d with H_t = I − β_t w_t w_tᵀ,
the matrices multiplied out one pair at a time from the layer's own parameters, in what attention computes."""

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
    recorded_attention,
)


def reference_w_beta(gates, x: torch.Tensor, conv: bool):
    """w_t and β_t as fla's PaTHAttention builds them: w = l2norm(conv(W_b W_a x)) per head, the conv causal over
    3 tokens with SiLU, β = 2σ(u·x + c)."""
    x = x.double()
    w = x @ gates.down.weight.double().T @ gates.up.weight.double().T  # [B, L, D]
    if conv:
        kernel = gates.conv.weight.double()[:, 0, :]  # [D, 3]: taps on t − 2, t − 1, t
        shifted = [torch.nn.functional.pad(w, (0, 0, lag, 0))[:, : w.shape[1]] for lag in (2, 1, 0)]
        w = torch.nn.functional.silu(sum(kernel[:, tap] * shifted[tap] for tap in range(3)))
    batch, length, _ = w.shape
    w = w.view(batch, length, HEADS, -1)
    w = (w / w.norm(dim=-1, keepdim=True)).transpose(1, 2)  # [B, H, L, Dh]
    beta = 2 * torch.sigmoid(x @ gates.beta.weight.double().T + gates.beta.bias.double()).transpose(1, 2)
    return w, beta


def path_scores(q, k, w, beta, causal: bool):
    """Each logit from the explicit product of d × d matrices: the tokens after the key up to the query (or,
    for a key after the query, the tokens from the query up to before the key, the nearer one next to q)."""
    batch, heads, length, d = q.shape
    eye = torch.eye(d, dtype=torch.float64)
    out = torch.zeros(batch, heads, length, length, dtype=torch.float64)
    for b in range(batch):
        for h in range(heads):
            H = [eye - beta[b, h, t] * torch.outer(w[b, h, t], w[b, h, t]) for t in range(length)]
            for i in range(length):
                for j in range(length):
                    product = eye
                    if j <= i:
                        for s in range(i, j, -1):  # H_i H_{i−1} ⋯ H_{j+1}
                            product = product @ H[s]
                    elif not causal:
                        for s in range(i, j):  # H_i H_{i+1} ⋯ H_{j−1}
                            product = product @ H[s]
                    out[b, h, i, j] = q[b, h, i] @ product @ k[b, h, j]
    return out / math.sqrt(d)


def randomised(encoder):
    torch.manual_seed(5)
    with torch.no_grad():
        for gates in encoder.gates:
            gates.beta.bias.normal_(std=1.5)  # β across (0, 2), reflections included
    return encoder


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("conv", [True, False])
@pytest.mark.parametrize(("rank", "depth"), [(8, 2), (32, 2), (8, None)])  # None: one set shared by the layers
def test_each_layers_logits_are_the_accumulated_householder_products(causal, conv, rank, depth):
    context = {"bidirectional": not causal, **({"depth": depth} if depth else {})}
    encoder = randomised(
        build_encoder_in_context(
            "path", dim=DIM, num_heads=HEADS, options={"rank": rank, "conv": conv}, context=context
        )
    )
    assert len(encoder.gates) == (depth or 1)
    model = model_with(encoder, depth=2, causal=causal)
    torch.manual_seed(1)
    x = torch.randn(2, LENGTH, DIM)
    for index, ((inputs, out), block) in enumerate(
        zip(recorded_attention(model, x, Positions(steps=torch.arange(LENGTH))), model.blocks, strict=True)
    ):
        w, beta = reference_w_beta(encoder.gates[index if depth else 0], inputs, conv)
        scores = lambda q, k, w=w, beta=beta: path_scores(q, k, w, beta, causal)  # noqa: E731
        expected = attention_from_scores(block.attn, inputs, scores, causal)
        torch.testing.assert_close(out.double(), expected, rtol=2e-4, atol=2e-5, msg=f"layer {index}")


def test_with_rope_the_householder_products_act_on_rotated_queries_and_keys():
    members = build_encoder_in_context(
        "rope+path", dim=DIM, num_heads=HEADS, options={"rope": {"base": 100.0}, "path": {"rank": 8}}, context={}
    )
    encoder = randomised(members.members["path"])
    model = model_with(members, depth=1, causal=True)
    torch.manual_seed(1)
    x = torch.randn(2, LENGTH, DIM)
    ((inputs, out),) = recorded_attention(model, x, Positions(steps=torch.arange(LENGTH)))
    w, beta = reference_w_beta(encoder.gates[0], inputs, conv=True)
    rope = build_encoder("rope", dim=DIM, num_heads=HEADS, base=100.0).double()

    def scores(q, k):
        steps = torch.arange(LENGTH)
        return path_scores(rope.rotate(q, steps), rope.rotate(k, steps), w, beta, causal=True)

    torch.testing.assert_close(
        out.double(), attention_from_scores(model.blocks[0].attn, inputs, scores, True), rtol=2e-4, atol=2e-5
    )
    # and the rotation matters: the same products on unrotated q, k are another attention
    plain = attention_from_scores(model.blocks[0].attn, inputs, lambda q, k: path_scores(q, k, w, beta, True), True)
    assert (out.double() - plain).abs().max() > 1e-3


def test_with_beta_zero_it_is_attention_without_positions_and_with_beta_two_a_reflection():
    """H = I at β = 0 (no position: plain q·k); at β = 2 and one shared w, H is a reflection and H² = I, so an
    even number of tokens between query and key cancels."""
    torch.manual_seed(0)
    q, k = torch.randn(1, 1, 5, 4), torch.randn(1, 1, 5, 4)
    from poslab.encoders.path import householder_logits

    w = torch.nn.functional.normalize(torch.randn(1, 1, 1, 4), dim=-1).expand(1, 1, 5, 4)
    plain = (q @ k.transpose(-1, -2)).tril()
    torch.testing.assert_close(householder_logits(q, k, w, torch.zeros(1, 1, 5)), plain)
    reflected = householder_logits(q, k, w, torch.full((1, 1, 5), 2.0))
    offsets = torch.arange(5)[:, None] - torch.arange(5)[None, :]
    even = (offsets >= 0) & (offsets % 2 == 0)
    torch.testing.assert_close(reflected[0, 0][even], plain[0, 0][even])
    odd = (offsets > 0) & (offsets % 2 == 1)
    assert (reflected[0, 0][odd] - plain[0, 0][odd]).abs().max() > 1e-3


def test_long_sequences_keep_float32_accuracy_against_the_products_applied_one_token_at_a_time():
    """At 96 tokens, β up to 2 (reflections) and w shared by runs of tokens (products that nearly cancel): the
    all-pairs form in float32 against the queries carried back through each H_s in float64."""
    from poslab.encoders.path import householder_logits

    torch.manual_seed(2)
    batch, heads, length, d = 1, 2, 96, 8
    q, k = torch.randn(batch, heads, length, d), torch.randn(batch, heads, length, d)
    w = torch.nn.functional.normalize(torch.randn(batch, heads, length // 8, d), dim=-1).repeat_interleave(8, dim=2)
    beta = 1.0 + torch.rand(batch, heads, length)
    expected = torch.zeros(batch, heads, length, length, dtype=torch.float64)
    for i in range(length):
        carried = q[:, :, i].double()  # H_{j+1} ⋯ H_i q_i, one more H each step back
        for j in range(i, -1, -1):
            expected[:, :, i, j] = (carried * k[:, :, j].double()).sum(-1)
            w_j, b_j = w[:, :, j].double(), beta[:, :, j, None].double()
            carried = carried - b_j * (carried * w_j).sum(-1, keepdim=True) * w_j
    torch.testing.assert_close(householder_logits(q, k, w, beta).double(), expected, rtol=1e-4, atol=1e-4)


def test_its_parameters_as_constructed():
    encoder = build_encoder_in_context("path", dim=DIM, num_heads=HEADS, options={}, context={"depth": 3})
    assert len(encoder.gates) == 3
    gates = encoder.gates[0]
    assert gates.down.weight.shape == (32, DIM) and gates.up.weight.shape == (DIM, 32)
    assert gates.down.bias is None and gates.up.bias is None
    assert gates.conv.weight.shape == (DIM, 1, 3) and gates.conv.bias is None
    assert gates.beta.weight.shape == (HEADS, DIM) and gates.beta.bias.shape == (HEADS,)
    assert len(build_encoder("path", dim=DIM, num_heads=HEADS).gates) == 1


def test_gradients_reach_every_transform_parameter():
    encoder = build_encoder_in_context("path", dim=DIM, num_heads=HEADS, options={"rank": 4}, context={"depth": 1})
    model = model_with(encoder, depth=1)
    model(torch.randn(2, 6, DIM), Positions(steps=torch.arange(6))).pow(2).sum().backward()
    for name, parameter in encoder.named_parameters():
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name


def test_with_fox_the_forget_gates_join_the_logits_before_the_scale_as_fla_does():
    """fla's ``naive_path_attn``: o = softmax((A + G_i − G_j)·scale)·v, A the Householder logits and G the
    cumulated log forget gates: the gate is scaled with the logits (FoX alone adds it after the scale)."""
    from tests.encoders.test_fox import forget_bias

    context = {"bidirectional": False, "depth": 2}
    encoder = build_encoder_in_context("path+fox", dim=DIM, num_heads=HEADS, options={}, context=context)
    randomised(encoder.members["path"])
    torch.manual_seed(3)
    with torch.no_grad():
        for gate in encoder.members["fox"].gates:
            gate.weight.normal_(std=0.5)
            gate.bias.normal_(std=1.0)
    model = model_with(encoder, depth=2, causal=True)
    torch.manual_seed(1)
    x = torch.randn(2, LENGTH, DIM)
    pos = Positions(steps=torch.arange(LENGTH))
    scale = 1 / math.sqrt(DIM // HEADS)
    for index, ((inputs, out), block) in enumerate(zip(recorded_attention(model, x, pos), model.blocks, strict=True)):
        w, beta = reference_w_beta(encoder.members["path"].gates[index], inputs, conv=True)
        fox = encoder.members["fox"].gates[index]
        gates = forget_bias(inputs, fox.weight.detach(), fox.bias.detach(), causal=True)

        def scores(q, k, w=w, beta=beta, gates=gates):
            return (path_scores(q, k, w, beta, causal=True) / scale + gates) * scale  # path_scores is A·scale

        expected = attention_from_scores(block.attn, inputs, scores, causal=True)
        torch.testing.assert_close(out.double(), expected, rtol=2e-4, atol=2e-5, msg=f"layer {index}")
