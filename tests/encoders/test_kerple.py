"""``kerple`` against its paper: values written out from the paper's kernels, not computed by the encoder."""

from __future__ import annotations

import math

import pytest
import torch

from poslab.encoders import build_encoder


def test_kerple_golden_values():
    """Chi et al. 2022, eq. 5 / 6 with r1 = 2, r2 = 0.5 on head 0 and r1 = 1, r2 = 1.5 on head 1."""
    enc = build_encoder("kerple", dim=8, num_heads=2)
    with torch.no_grad():
        enc.r1.copy_(torch.tensor([2.0, 1.0]))
        enc.r2.copy_(torch.tensor([0.5, 1.5]))
    bias = enc.attention_bias(torch.arange(4), torch.arange(4))
    # query 3, keys 0..3: distances 3, 2, 1, 0
    assert bias[0, 3].tolist() == pytest.approx([-2 * math.log(2.5), -2 * math.log(2.0), -2 * math.log(1.5), 0.0])
    assert bias[1, 3].tolist() == pytest.approx([-math.log(5.5), -math.log(4.0), -math.log(2.5), 0.0])
    power = build_encoder("kerple", dim=8, num_heads=2, variant="power")
    with torch.no_grad():
        power.r1.copy_(torch.tensor([2.0, 1.0]))
        power.r2.copy_(torch.tensor([0.5, 1.5]))
    bias = power.attention_bias(torch.arange(4), torch.arange(4))
    assert bias[0, 3].tolist() == pytest.approx([-2 * 3**0.5, -2 * 2**0.5, -2.0, 0.0])
    assert bias[1, 0].tolist() == pytest.approx([0.0, -1.0, -(2**1.5), -(3**1.5)])  # symmetric in |m - n|


def test_kerple_coefficients_are_clamped_where_stored_and_keep_their_gradient():
    """As the reference does before each use (``self.bias_p.data = self.bias_p.data.clamp(min=self.eps)``):
    stored values out of range are moved to eps (and 2 for the power's exponent), so the bias never grows
    with distance, and a coefficient at the bound still has a gradient and trains on."""
    enc = build_encoder("kerple", dim=8, num_heads=2, variant="power")
    with torch.no_grad():
        enc.r1.copy_(torch.tensor([-1.0, 0.5]))
        enc.r2.copy_(torch.tensor([5.0, -3.0]))
    bias = enc.attention_bias(torch.arange(6), torch.arange(6))
    assert enc.r1.tolist() == pytest.approx([0.01, 0.5]) and enc.r2.tolist() == pytest.approx([2.0, 0.01])
    assert (bias <= 0).all() and (bias[:, 5, :-1].diff(dim=-1) >= 0).all()  # farther keys never score higher
    bias.sum().backward()
    assert (enc.r1.grad != 0).all() and (enc.r2.grad != 0).all()  # at the bound too


def test_a_kerple_head_that_starts_below_eps_is_not_frozen():
    """The log kernel: r1 stored below eps. Gradient descent on a loss that wants a stronger decay raises it
    above eps within a few steps (with a clamp only where it is used, its gradient is 0 and it stays put)."""
    enc = build_encoder("kerple", dim=8, num_heads=2)
    with torch.no_grad():
        enc.r1.copy_(torch.tensor([0.001, 1.0]))
        enc.r2.fill_(0.5)
    optimizer = torch.optim.SGD(enc.parameters(), lr=0.1)
    for _ in range(5):
        optimizer.zero_grad()
        enc.attention_bias(torch.arange(8), torch.arange(8)).sum().backward()  # minimising: larger r1, deeper bias
        optimizer.step()
    assert enc.r1[0] > 0.05


def test_kerple_learns_per_head_and_rejects_a_bad_eps():
    enc = build_encoder("kerple", dim=8, num_heads=4)
    assert enc.r1.shape == enc.r2.shape == (4,) and enc.r1.requires_grad
    assert 0 <= enc.r1.min() and enc.r1.max() <= 2 and enc.r2.max() <= 1  # the reference's initialisation
    from poslab.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^kerple: eps must be > 0, got 0.0$"):
        build_encoder("kerple", dim=8, num_heads=2, eps=0.0)
