"""Dynamic NTK against its definition: a fixed factor s, the length l′ drives the growth.

Reference (emozilla 2023, as Hugging Face's ``_compute_dynamic_ntk_parameters``):
base′ = base · (s · l′ / L₀ − (s − 1))^(d / (d − 2)) once l′ > L₀, and θ_i = base′^(−2i / d).
"""

from __future__ import annotations

import pytest
import torch

from poslab.encoders.rope_scaling import RopeScaling, scaled_frequencies


def thetas(base: float, d: int) -> torch.Tensor:
    return torch.tensor([base ** (-2 * i / d) for i in range(d // 2)], dtype=torch.float64)


@pytest.mark.parametrize(("s", "length"), [(2.0, 96), (2.0, 256), (4.0, 512), (1.0, 512)])
def test_dynamic_ntk_at_a_fixed_factor_follows_the_length(s, length):
    d, base, original = 32, 10000.0, 64
    inv, factor = scaled_frequencies(RopeScaling("dynamic", s), base=base, dim=d, original_max_len=original,
                                     seq_len=length)  # fmt: skip
    grown = base * (s * length / original - (s - 1)) ** (d / (d - 2))
    torch.testing.assert_close(inv, thetas(grown, d), rtol=1e-12, atol=0)
    assert factor == 1.0


def test_dynamic_ntk_at_factor_1_over_a_whole_window_is_ntk_at_the_window_multiple():
    """Why the length study scores dynamic NTK as in generation: over a whole window of m · L₀ tokens it
    is exactly NTK at factor m."""
    d, base, original = 32, 10000.0, 64
    for m in (2, 4, 8):
        dynamic, _ = scaled_frequencies(RopeScaling("dynamic", 1.0), base=base, dim=d, original_max_len=original,
                                        seq_len=m * original)  # fmt: skip
        torch.testing.assert_close(dynamic, thetas(base * m ** (d / (d - 2)), d), rtol=1e-12, atol=0)


def test_dynamic_ntk_within_the_original_context_is_plain_rope():
    inv, _ = scaled_frequencies(RopeScaling("dynamic", 2.0), base=10000.0, dim=32, original_max_len=64, seq_len=40)
    torch.testing.assert_close(inv, thetas(10000.0, 32), rtol=1e-12, atol=0)
