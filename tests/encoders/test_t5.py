"""T5's bucketed relative bias (Raffel et al. 2020, §2.1; HF ``_relative_position_bucket``) as constructed: each
flag's own buckets at named offsets, the bias the encoder gives each (query, key) pair of positions that are data
(not ``arange``), and what attention computes with it, causal and bidirectional."""

from __future__ import annotations

import math

import pytest
import torch

from poslab.encoders import build_encoder
from poslab.positions import Positions
from tests.encoders.test_attention_computes import (
    DIM,
    HEADS,
    attention_from_scores,
    model_with,
    plain_scores,
    recorded_attention,
)

#: (bidirectional, num_buckets, max_distance) -> {offset k − q: bucket}, worked out by hand from the reference.
GOLDEN = {
    # causal, 32 / 128: exact below 16, then 16 + ⌊ln(d/16) / ln 8 · 16⌋ up to 31; the future is bucket 0
    (False, 32, 128): {0: 0, -1: 1, -15: 15, -17: 16, -24: 19, -40: 23, -100: 30, -120: 31, -127: 31, -500: 31, 5: 0},
    # bidirectional, 32 / 128: 16 buckets a direction, exact below 8, then 8 + ⌊ln(d/8) / ln 16 · 8⌋; ahead +16
    (True, 32, 128): {
        0: 0, -1: 1, -7: 7, -9: 8, -12: 9, -20: 10, -50: 13, -100: 15, -127: 15, -500: 15,
        1: 17, 7: 23, 9: 24, 12: 25, 20: 26, 50: 29, 100: 31, 500: 31,
    },
    # causal, 8 / 20: exact below 4, then 4 + ⌊ln(d/4) / ln 5 · 4⌋ up to 7
    (False, 8, 20): {-3: 3, -5: 4, -9: 6, -12: 6, -15: 7, -50: 7, 3: 0},
    # bidirectional, 8 / 20: 4 a direction, exact below 2, then 2 + ⌊ln(d/2) / ln 10 · 2⌋; ahead +4
    (True, 8, 20): {-1: 1, -3: 2, -7: 3, -30: 3, 1: 5, 3: 6, 7: 7, 30: 7},
}  # fmt: skip


def reference_bucket(offset: int, bidirectional: bool, num_buckets: int, max_distance: int) -> int:
    """HF ``_relative_position_bucket`` for one offset, in plain Python."""
    bucket = 0
    if bidirectional:
        num_buckets //= 2
        bucket += num_buckets if offset > 0 else 0
        distance = abs(offset)
    else:
        distance = max(-offset, 0)
    exact = num_buckets // 2
    if distance < exact:
        return bucket + distance
    large = exact + int(math.log(distance / exact) / math.log(max_distance / exact) * (num_buckets - exact))
    return bucket + min(large, num_buckets - 1)


def built(bidirectional: bool, num_buckets: int, max_distance: int):
    """The encoder with a distinct value per (bucket, head): 100·bucket + head."""
    enc = build_encoder("t5", dim=DIM, num_heads=HEADS, num_buckets=num_buckets, max_distance=max_distance,
                        bidirectional=bidirectional)  # fmt: skip
    with torch.no_grad():
        enc.bias.weight.copy_(100.0 * torch.arange(num_buckets)[:, None] + torch.arange(HEADS)[None, :])
    return enc


@pytest.mark.parametrize(("flags", "table"), GOLDEN.items(), ids=lambda v: str(v) if isinstance(v, tuple) else "")
def test_each_flags_buckets_at_named_offsets(flags, table):
    bidirectional, num_buckets, max_distance = flags
    for offset, bucket in table.items():
        assert reference_bucket(offset, *flags) == bucket, (offset, bucket)  # the hand-worked value is HF's
    enc = built(bidirectional, num_buckets, max_distance)
    # one query at position 500, one key per offset: the bias is the bucket's value per head
    keys = torch.tensor([500 + o for o in table], dtype=torch.float32)
    bias = enc.attention_bias(torch.tensor([500.0]), keys)  # [H, 1, K]
    expected = torch.tensor([[100.0 * b + h for b in table.values()] for h in range(HEADS)])
    torch.testing.assert_close(bias[:, 0, :], expected)


@pytest.mark.parametrize("bidirectional", [False, True])
def test_attention_adds_the_bucket_bias_to_the_scaled_logits(bidirectional):
    """Every layer's logits are q·k/√d + b_h(bucket(p_k − p_q)) on irregular positions (steps 0, 1, 5, 20, …),
    the bias shared by the layers (T5 shares one table across layers)."""
    steps = [0, 1, 5, 20, 21, 40, 90, 91, 150, 300]
    enc = build_encoder("t5", dim=DIM, num_heads=HEADS, bidirectional=bidirectional)
    torch.manual_seed(2)
    torch.nn.init.normal_(enc.bias.weight)
    table = enc.bias.weight.detach().double()
    bias = torch.tensor(
        [[[table[reference_bucket(k - q, bidirectional, 32, 128), h].item() for k in steps] for q in steps]
         for h in range(HEADS)],
        dtype=torch.float64,
    )  # fmt: skip
    model = model_with(enc, depth=2, causal=not bidirectional)
    torch.manual_seed(1)
    x = torch.randn(2, len(steps), DIM)
    pos = Positions(steps=torch.tensor(steps))
    for (inputs, out), block in zip(recorded_attention(model, x, pos), model.blocks, strict=True):
        expected = attention_from_scores(block.attn, inputs, lambda q, k: plain_scores(q, k) + bias, not bidirectional)
        torch.testing.assert_close(out.double(), expected, rtol=2e-4, atol=2e-5)
