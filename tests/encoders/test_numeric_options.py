"""Numeric options away from their defaults, each against its formula written out here: the sinusoid bases and
temperatures, FIRE's and KERPLE's ``eps``, and the learned tables' ``init_std`` (the module as constructed)."""

from __future__ import annotations

import math

import pytest
import torch

from poslab.encoders import build_encoder


def mae_1d(position: float, channels: int, temperature: float) -> list[float]:
    """MAE's ``get_1d_sincos_pos_embed_from_grid``: [sin(p·ω_k) … | cos(p·ω_k) …], ω_k = 1/T^(k/(channels/2))."""
    half = channels // 2
    omega = [temperature ** (-k / half) for k in range(half)]
    return [math.sin(position * w) for w in omega] + [math.cos(position * w) for w in omega]


@pytest.mark.parametrize("base", [10000.0, 500.0, 10.0])
def test_sinusoidal_base(base):
    """Vaswani et al. 2017, §3.5: PE(p, 2i) = sin(p / base^(2i/d)), PE(p, 2i + 1) = cos(…), at positions 0, 7, 300."""
    enc = build_encoder("sinusoidal", dim=8, num_heads=1, base=base)
    steps = [0, 7, 300]
    got = enc.encode_input(torch.zeros(1, 3, 8), torch.tensor(steps))[0]
    expected = [[f(p / base ** (2 * i / 8)) for i in range(4) for f in (math.sin, math.cos)] for p in steps]
    torch.testing.assert_close(got.double(), torch.tensor(expected, dtype=torch.float64), atol=1e-6, rtol=0)


@pytest.mark.parametrize("temperature", [10000.0, 100.0])
def test_sincos2d_temperature_column_half_then_row_half(temperature):
    enc = build_encoder("sincos2d", dim=16, num_heads=1, temperature=temperature)
    cells = [(0.0, 0.0), (2.0, 3.0), (1.5, 0.25)]  # (row, col), fractional too
    got = enc.encode_input(torch.zeros(1, 3, 16), torch.tensor(cells))[0]
    expected = [mae_1d(c, 8, temperature) + mae_1d(r, 8, temperature) for r, c in cells]
    torch.testing.assert_close(got.double(), torch.tensor(expected, dtype=torch.float64), atol=1e-6, rtol=0)


@pytest.mark.parametrize("temperature", [10000.0, 100.0])
def test_sincos3d_temperature_time_then_column_then_row(temperature):
    enc = build_encoder("sincos3d", dim=32, num_heads=1, temperature=temperature)
    cells = [(0.0, 0.0, 0.0), (3.0, 1.0, 2.0), (0.5, 2.0, 0.0)]  # (t, row, col)
    got = enc.encode_input(torch.zeros(1, 3, 32), torch.tensor(cells))[0]
    expected = [mae_1d(t, 8, temperature) + mae_1d(c, 12, temperature) + mae_1d(r, 12, temperature)
                for t, r, c in cells]  # fmt: skip
    torch.testing.assert_close(got.double(), torch.tensor(expected, dtype=torch.float64), atol=1e-6, rtol=0)


@pytest.mark.parametrize("eps", [1e-6, 0.5])
@pytest.mark.parametrize(("init_c", "threshold"), [(0.1, 512.0), (1.0, 4.0)])
def test_fire_normalised_distance(eps, init_c, threshold):
    """Li et al. 2023, eq. 4 with progressive interpolation: ψ(i − j) / (ψ(max(L, i)) + eps), ψ(x) = log(c·|x| + 1),
    c and L as constructed (L = the threshold while its learned scale is 1)."""
    enc = build_encoder("fire", dim=8, num_heads=2, init_c=init_c, threshold=threshold, eps=eps)
    q, k = [0, 3, 10, 700], [0, 1, 3, 10]

    def psi(x):
        return math.log(init_c * abs(x) + 1)

    expected = [[psi(i - j) / (psi(max(threshold, i)) + eps) for j in k] for i in q]
    got = enc.normalized_distance(torch.tensor(q), torch.tensor(k))
    torch.testing.assert_close(got.double(), torch.tensor(expected, dtype=torch.float64), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("eps", [0.01, 0.5])
@pytest.mark.parametrize("variant", ["log", "power"])
def test_kerple_holds_its_coefficients_at_eps_and_the_power_at_two(eps, variant):
    """Chi et al. 2022: −r₁·log(1 + r₂·|d|) or −r₁·|d|^r₂; r₁, r₂ held at least ``eps`` (and the power's r₂ at most
    2), the stored values clamped as the reference does."""
    enc = build_encoder("kerple", dim=12, num_heads=3, variant=variant, eps=eps)
    with torch.no_grad():
        enc.r1.copy_(torch.tensor([0.001, 0.8, 1.5]))
        enc.r2.copy_(torch.tensor([0.3, 0.0001, 3.0]))
    r1 = [max(0.001, eps), max(0.8, eps), max(1.5, eps)]
    r2 = [max(0.3, eps), max(0.0001, eps), 3.0 if variant == "log" else 2.0]
    offsets = [-7, -1, 0, 4]
    bias = enc.relative_bias(torch.tensor(offsets, dtype=torch.float32))
    kernel = (lambda a, b, d: -a * math.log1p(b * abs(d))) if variant == "log" else (lambda a, b, d: -a * abs(d) ** b)
    expected = [[kernel(a, b, d) for d in offsets] for a, b in zip(r1, r2, strict=True)]
    torch.testing.assert_close(bias.double(), torch.tensor(expected, dtype=torch.float64), atol=1e-6, rtol=1e-5)
    assert enc.r1.tolist() == pytest.approx(r1) and enc.r2.tolist() == pytest.approx(r2)  # stored, clamped


@pytest.mark.parametrize("init_std", [0.0, 0.02, 0.1])
@pytest.mark.parametrize(
    ("name", "options", "tables"),
    [
        ("learned", {"max_len": 256}, ["table.weight"]),
        ("learned2d", {"grid_size": (16, 16)}, ["table"]),
        ("learned3d", {"grid_size": (8, 8), "frames": 8}, ["time_table", "space_table"]),
    ],
)
def test_learned_tables_start_at_their_init_std(init_std, name, options, tables):
    torch.manual_seed(0)
    enc = build_encoder(name, dim=64, num_heads=2, init_std=init_std, **options)
    values = dict(enc.named_parameters())
    for table in tables:
        std = values[table].detach().std().item()
        assert std == pytest.approx(init_std, rel=0.1, abs=1e-9), (table, std)
