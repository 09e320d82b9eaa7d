"""RoPE context extensions as pure functions: config -> (inverse frequencies, attention factor).

Table-driven like Hugging Face's ``modeling_rope_utils.py``; every function
returns float64 inverse frequencies for the ``dim`` rotated channels and the
factor that multiplies cos and sin (so q·k scales by its square).

* ``linear`` — Position Interpolation (Chen et al. 2023): θ_i / s, i.e. positions / s.
* ``ntk`` — NTK-aware scaling (bloc97, 2023): base' = base · s^(d/(d−2)).
* ``dynamic`` — dynamic NTK (emozilla, 2023; HF ``_compute_dynamic_ntk_parameters``):
  the NTK base recomputed from the current length L once it exceeds the original,
  base' = base · (s·L/L₀ − (s − 1))^(d/(d−2)); s is a fixed setting (1 by
  default), the length drives the growth (YaRN §3.3: s = max(1, L/L₀)).
* ``yarn`` — YaRN (Peng et al. 2023, eqs. 17–21): per-dimension blend of
  interpolated and original frequencies with a linear ramp between the
  dimensions that rotate ``beta_fast`` (32) and ``beta_slow`` (1) times over
  the original context; attention factor √(1/t) = 0.1·ln(s) + 1 (eq. 22).
* ``llama3`` — Llama 3.1's scaling (Meta 2024; HF ``_compute_llama3_parameters``): by
  wavelength λ_i = 2π/θ_i against the original context L₀, frequencies with
  λ < L₀/``high_freq_factor`` (4) kept, λ > L₀/``low_freq_factor`` (1) divided by s,
  those between blended with weight (L₀/λ − low)/(high − low) on the kept one.
* ``longrope`` — LongRoPE (Ding et al. 2024, eq. 3; HF ``_compute_longrope_parameters``):
  θ_i / λ_i with one searched rescale factor λ_i per frequency, ``long_factor`` when
  extending (s > 1), ``short_factor`` otherwise, attention factor √(1 + ln s / ln L₀)
  (``attention_factor`` overrides it). The factors come from a search (a model's
  config, as Phi-3's; the length study runs one, :mod:`poslab.encoders.longrope_search`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Literal, Optional

import torch

from poslab.config.ranges import POSITIVE, OptionalCount, Positive, Range
from poslab.errors import ConfigError

ScalingType = Literal["none", "linear", "ntk", "dynamic", "yarn", "llama3", "longrope"]
#: The scalings that need the original context L₀.
NEED_ORIGINAL = ("dynamic", "yarn", "llama3", "longrope")


@dataclass
class RopeScaling:
    """``encoder.scaling`` of ``rope``; ``original_max_len`` null = the training context. The ranges are Hugging
    Face's (``_validate_*_rope_parameters``): a factor below 1 would shrink the context it claims to extend."""

    type: ScalingType = "none"
    factor: Annotated[float, Range(1)] = 1.0
    original_max_len: OptionalCount = None
    beta_fast: Positive = 32.0
    beta_slow: Positive = 1.0
    low_freq_factor: Positive = 1.0  # llama3: wavelengths past L₀ / low_freq_factor are divided by the factor
    high_freq_factor: Positive = 4.0  # llama3: wavelengths below L₀ / high_freq_factor are kept
    long_factor: Annotated[Optional[list[float]], POSITIVE] = None  # noqa: UP045  longrope: λ_i per frequency, when extending
    short_factor: Annotated[Optional[list[float]], POSITIVE] = None  # noqa: UP045  longrope: λ_i per frequency, within L₀
    attention_factor: Annotated[Optional[float], POSITIVE] = None  # noqa: UP045  longrope: None = √(1 + ln s / ln L₀)

    def __post_init__(self) -> None:  # what holds between the fields; their ranges are checked with the config
        if self.beta_fast <= self.beta_slow:
            raise ConfigError(
                f"rope scaling: beta_fast ({self.beta_fast:g}) must be above beta_slow ({self.beta_slow:g})"
            )
        if self.high_freq_factor <= self.low_freq_factor:
            raise ConfigError(
                f"rope scaling: high_freq_factor ({self.high_freq_factor:g}) must be above "
                f"low_freq_factor ({self.low_freq_factor:g})"
            )


def default_inv_freq(base: float, dim: int, device: torch.device | str | None = None) -> torch.Tensor:
    """RoFormer eq. 15: θ_i = base^(−2i/d), i < d/2 (float64), made on ``device`` (no copy from the host)."""
    return 1.0 / base ** (torch.arange(0, dim, 2, dtype=torch.float64, device=device) / dim)


def _none(base, dim, s, original, seq_len, cfg, device):
    return default_inv_freq(base, dim, device), 1.0


def _linear(base, dim, s, original, seq_len, cfg, device):
    return default_inv_freq(base, dim, device) / s, 1.0


def _ntk(base, dim, s, original, seq_len, cfg, device):
    return default_inv_freq(base * s ** (dim / (dim - 2)), dim, device), 1.0


def _dynamic(base, dim, s, original, seq_len, cfg, device):
    length = max(seq_len, original)
    scaled_base = base * ((s * length / original) - (s - 1)) ** (dim / (dim - 2))
    return default_inv_freq(scaled_base, dim, device), 1.0


def yarn_attention_factor(s: float) -> float:
    """YaRN eq. 22: √(1/t) = 0.1·ln(s) + 1 (1 for s ≤ 1)."""
    return 1.0 if s <= 1 else 0.1 * math.log(s) + 1.0


def _yarn(base, dim, s, original, seq_len, cfg, device):
    def correction_dim(rotations: float) -> float:
        # the dimension index whose wavelength fits `rotations` times into the original context
        return (dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low = max(math.floor(correction_dim(cfg.beta_fast)), 0)
    high = min(math.ceil(correction_dim(cfg.beta_slow)), dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(dim // 2, dtype=torch.float64, device=device) - low) / (high - low)).clamp(0, 1)
    extrapolation = 1 - ramp  # 1: keep the original frequency (fast dims), 0: interpolate
    inv = default_inv_freq(base, dim, device)
    return inv / s * (1 - extrapolation) + inv * extrapolation, yarn_attention_factor(s)


def _llama3(base, dim, s, original, seq_len, cfg, device):
    inv = default_inv_freq(base, dim, device)
    wavelength = 2 * math.pi / inv
    low, high = cfg.low_freq_factor, cfg.high_freq_factor
    if not high > low:
        raise ValueError(f"llama3 scaling needs high_freq_factor > low_freq_factor (got {high} and {low})")
    kept = (original / wavelength - low) / (high - low)  # share of the original frequency, 1 at λ = L₀/high
    blended = inv / s * (1 - kept) + inv * kept
    return torch.where(
        wavelength < original / high, inv, torch.where(wavelength > original / low, inv / s, blended)
    ), 1.0


def _longrope(base, dim, s, original, seq_len, cfg, device):
    factors = cfg.long_factor if s > 1 else cfg.short_factor
    which = "long_factor" if s > 1 else "short_factor"
    if factors is None or len(factors) != dim // 2:
        got = "none" if factors is None else f"{len(factors)} values"
        raise ValueError(f"longrope scaling needs {which} with {dim // 2} values, one per frequency (got {got})")
    rescale = torch.tensor(list(factors), dtype=torch.float64, device=device)
    if cfg.attention_factor is not None:
        attention = float(cfg.attention_factor)
    else:
        attention = 1.0 if s <= 1 else math.sqrt(1 + math.log(s) / math.log(original))
    return default_inv_freq(base, dim, device) / rescale, attention


SCALINGS: dict[str, Callable] = {
    "none": _none,
    "linear": _linear,
    "ntk": _ntk,
    "dynamic": _dynamic,
    "yarn": _yarn,
    "llama3": _llama3,
    "longrope": _longrope,
}


def scaled_frequencies(
    cfg: RopeScaling,
    *,
    base: float,
    dim: int,
    original_max_len: int | None,
    seq_len: int = 0,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, float]:
    """(inverse frequencies ``[dim/2]`` float64 on ``device``, attention factor) for ``cfg``."""
    if cfg.type == "none" or (cfg.factor == 1.0 and cfg.type not in ("dynamic", "longrope")):
        return default_inv_freq(base, dim, device), 1.0
    original = cfg.original_max_len or original_max_len
    if original is None and cfg.type in NEED_ORIGINAL:
        raise ValueError(f"rope scaling '{cfg.type}' needs original_max_len")
    return SCALINGS[cfg.type](base, dim, float(cfg.factor), original, seq_len, cfg, device)
