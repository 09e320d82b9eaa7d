"""Dynamic NTK against its definition: a fixed factor s, the length l′ drives the growth.

Reference (emozilla 2023, as Hugging Face's ``_compute_dynamic_ntk_parameters``):
base′ = base · (s · l′ / L₀ − (s − 1))^(d / (d − 2)) once l′ > L₀, and θ_i = base′^(−2i / d).
"""

from __future__ import annotations

import math

import pytest
import torch

from poslab.encoders import build_encoder
from poslab.encoders.rope_scaling import RopeScaling, scaled_frequencies
from poslab.errors import ConfigError


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


def llama3_reference(base, d, s, original, low=1.0, high=4.0):
    """Llama 3.1's ``apply_scaling`` (Meta's reference, as HF ``_compute_llama3_parameters``), one frequency at
    a time: by wavelength λ = 2π/θ, keep θ below L₀/high, θ/s above L₀/low, between them
    (1 − w)·θ/s + w·θ with w = (L₀/λ − low)/(high − low)."""
    out = []
    for theta in thetas(base, d).tolist():
        wavelength = 2 * math.pi / theta
        if wavelength < original / high:
            out.append(theta)
        elif wavelength > original / low:
            out.append(theta / s)
        else:
            w = (original / wavelength - low) / (high - low)
            out.append((1 - w) * theta / s + w * theta)
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.parametrize(
    ("base", "d", "s", "original", "low", "high"),
    [(500000.0, 128, 8.0, 8192, 1.0, 4.0), (10000.0, 32, 4.0, 64, 1.0, 4.0), (10000.0, 32, 2.0, 64, 2.0, 8.0)],
)
def test_llama3_scaling_is_the_reference_per_wavelength(base, d, s, original, low, high):
    """Llama 3.1's own settings (θ 500,000, head 128, ×8 from 8,192) and poslab's (head 32, context 64)."""
    cfg = RopeScaling("llama3", s, original, low_freq_factor=low, high_freq_factor=high)
    inv, factor = scaled_frequencies(cfg, base=base, dim=d, original_max_len=None)
    torch.testing.assert_close(inv, llama3_reference(base, d, s, original, low, high), rtol=1e-12, atol=0)
    assert factor == 1.0
    plain = thetas(base, d)
    wavelength = 2 * math.pi / plain
    fast = wavelength < original / high
    torch.testing.assert_close(inv[fast], plain[fast], rtol=1e-12, atol=0)  # kept
    torch.testing.assert_close(inv[wavelength > original / low], plain[wavelength > original / low] / s)
    assert ((wavelength >= original / high) & (wavelength <= original / low)).any()  # the blend is exercised


def test_llama3_needs_high_above_low():
    with pytest.raises(ConfigError, match=r"high_freq_factor \(1\) must be above low_freq_factor \(4\)"):
        RopeScaling("llama3", 4.0, 64, low_freq_factor=4.0, high_freq_factor=1.0)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"factor": 0.5}, "factor must be >= 1, got 0.5"),
        ({"beta_fast": 1.0, "beta_slow": 2.0}, r"beta_fast \(1\) must be above beta_slow \(2\)"),
        ({"long_factor": [1.0, 0.0]}, "long_factor must be > 0, got 0.0"),
        ({"attention_factor": -1.0}, "attention_factor must be > 0, got -1.0"),
        ({"original_max_len": 0}, "original_max_len must be >= 1, got 0"),
    ],
)
def test_a_scaling_built_in_code_refuses_what_a_config_would(options, message):
    with pytest.raises(ConfigError, match=message):
        build_encoder("rope", dim=32, num_heads=2, max_len=64, scaling={"type": "yarn", "factor": 2.0, **options})


def test_longrope_divides_each_frequency_by_its_factor_and_scales_attention():
    """LongRoPE (Ding et al. 2024, eq. 3): θ_i / λ_i, the long factors past L₀, the short within it; attention
    factor √(1 + ln s / ln L₀): Phi-3-mini-128k's s = 32 from L₀ = 4,096 gives 1.19024."""
    d = 16
    long, short = [1.0 + i for i in range(d // 2)], [1.0 + 0.1 * i for i in range(d // 2)]
    cfg = RopeScaling("longrope", 32.0, 4096, long_factor=long, short_factor=short)
    inv, factor = scaled_frequencies(cfg, base=10000.0, dim=d, original_max_len=None)
    torch.testing.assert_close(inv, thetas(10000.0, d) / torch.tensor(long, dtype=torch.float64), rtol=1e-12, atol=0)
    assert factor == pytest.approx(1.1902380714238083, rel=1e-12)
    within, factor = scaled_frequencies(
        RopeScaling("longrope", 1.0, 4096, long_factor=long, short_factor=short),
        base=10000.0,
        dim=d,
        original_max_len=None,
    )
    torch.testing.assert_close(
        within, thetas(10000.0, d) / torch.tensor(short, dtype=torch.float64), rtol=1e-12, atol=0
    )
    assert factor == 1.0
    given = RopeScaling("longrope", 32.0, 4096, long_factor=long, short_factor=short, attention_factor=1.5)
    assert scaled_frequencies(given, base=10000.0, dim=d, original_max_len=None)[1] == 1.5


def test_longrope_needs_one_factor_per_frequency():
    with pytest.raises(ValueError, match="long_factor with 8 values, one per frequency \\(got 3 values\\)"):
        scaled_frequencies(RopeScaling("longrope", 4.0, 64, long_factor=[1.0, 2.0, 3.0]), base=1e4, dim=16,
                           original_max_len=None)  # fmt: skip


def test_rope_takes_both_from_its_config_and_the_length_study_applies_llama3():
    """``encoder.scaling`` builds them (longrope with its factors); ``extended("llama3", m)`` is what the length
    study applies at m x, as it does longrope once its factors are searched (tests/encoders/test_longrope_search.py)."""
    from omegaconf import OmegaConf

    from poslab.config.composition import compose
    from poslab.encoders import build_encoder
    from poslab.errors import ConfigError

    long = [1.0] * 7 + [2.0]
    cfg = compose(["modality=text", "encoder=rope", "model.dim=64", "model.num_heads=4",
                   f"encoder.scaling={{type: longrope, factor: 2.0, long_factor: {long}}}"])  # fmt: skip
    scaling = OmegaConf.to_container(cfg.encoder.scaling)
    assert scaling["long_factor"] == long
    rope = build_encoder("rope", dim=64, num_heads=4, max_len=64, scaling=scaling)
    inv, factor = rope.frequencies()
    torch.testing.assert_close(inv, thetas(10000.0, 16) / torch.tensor(long, dtype=torch.float64), rtol=1e-12, atol=0)
    assert factor == pytest.approx(math.sqrt(1 + math.log(2) / math.log(64)))
    extended = build_encoder("rope", dim=64, num_heads=4, max_len=64).extended("llama3", 4.0)
    torch.testing.assert_close(extended.frequencies()[0], llama3_reference(10000.0, 16, 4.0, 64), rtol=1e-12, atol=0)
    assert list(compose(["modality=text", "eval.rope_scaling=[longrope]"]).eval.rope_scaling) == ["longrope"]
    with pytest.raises(
        ConfigError,
        match="expects one of 'linear', 'ntk', 'dynamic', 'yarn', 'llama3', 'longrope', 'longrope2', 'dca', 'swan', "
        "got 'pi'",
    ):
        compose(["modality=text", "eval.rope_scaling=[pi]"])
