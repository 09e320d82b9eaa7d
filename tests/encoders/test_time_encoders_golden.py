"""The timestamp encoders as constructed, at a named timestamp, for every value of their options: what each adds
to the tokens, worked out here from the date itself (``datetime``), so a shift of an hour or a day fails.

2024-02-29 13:47:00 UTC is a Thursday (weekday 3, Monday = 0), day 29 of month 2, minute bucket 47 // 15 = 3.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
import torch

from poslab.encoders import build_encoder

NAMED = datetime(2024, 2, 29, 13, 47, tzinfo=UTC)
TABLE_ORDER = ["month", "day", "weekday", "hour", "minute"]


def stamp(*moments: datetime) -> torch.Tensor:
    return torch.tensor([int(m.timestamp()) for m in moments])


def calendar_values(moment: datetime) -> dict[str, int]:
    return {"month": moment.month, "day": moment.day, "weekday": moment.weekday(), "hour": moment.hour,
            "minute": moment.minute // 15}  # fmt: skip


def vaswani(position: int, dim: int) -> list[float]:
    """PE(p, 2i) = sin(p / 10000^(2i/d)), PE(p, 2i + 1) = cos(…) (Vaswani et al. 2017, §3.5)."""
    out = []
    for i in range(dim // 2):
        angle = position / 10000 ** (2 * i / dim)
        out += [math.sin(angle), math.cos(angle)]
    return out


@pytest.mark.parametrize(("fields", "step_seconds", "used"), [
    (None, 3600, ["month", "day", "weekday", "hour"]),  # hourly data: no minute table
    (None, 900, ["month", "day", "weekday", "hour", "minute"]),  # finer than hourly: quarter-hour buckets
    (["weekday", "hour"], 3600, ["weekday", "hour"]),
    (["minute", "month"], 600, ["minute", "month"]),
    (["minute", "month"], 3600, ["month"]),  # the minute table only below an hour
])  # fmt: skip
def test_learned_calendar_adds_each_fields_row_at_the_named_timestamp(fields, step_seconds, used):
    """TSLib ``TemporalEmbedding``: x + Σ_f E_f[value_f]. Each table's row r set to r in the field's own column,
    so the output reads the row each field looked up."""
    enc = build_encoder("calendar", dim=8, num_heads=1, fields=fields, step_seconds=step_seconds)
    assert list(enc.fields) == used and all(p.requires_grad for p in enc.parameters())
    with torch.no_grad():
        for name, table in enc.tables.items():
            table.weight.zero_()
            table.weight[:, TABLE_ORDER.index(name)] = torch.arange(table.num_embeddings, dtype=torch.float32)
    hour_later, day_later = NAMED + timedelta(hours=1), NAMED + timedelta(days=1)
    out = enc.encode_input(torch.zeros(1, 3, 8), stamp(NAMED, hour_later, day_later))[0]
    for row, moment in zip(out, (NAMED, hour_later, day_later), strict=True):
        values = calendar_values(moment)
        expected = [float(values[name]) if name in used else 0.0 for name in TABLE_ORDER] + [0.0] * 3
        assert row.tolist() == expected
    assert calendar_values(day_later) == {"month": 3, "day": 1, "weekday": 4, "hour": 13, "minute": 3}  # leap day


@pytest.mark.parametrize("step_seconds", [3600, 900])
def test_fixed_calendar_adds_the_sinusoid_of_each_fields_value(step_seconds):
    """TSLib ``FixedEmbedding``: each table's rows are Vaswani's sinusoids of the row index, not trained."""
    enc = build_encoder("calendar", dim=8, num_heads=1, embedding="fixed", step_seconds=step_seconds)
    assert not any(p.requires_grad for p in enc.parameters())
    values = calendar_values(NAMED)
    used = [name for name in TABLE_ORDER if name != "minute" or step_seconds < 3600]
    expected = torch.tensor([sum(v) for v in zip(*(vaswani(values[name], 8) for name in used), strict=True)])
    got = enc.encode_input(torch.zeros(1, 1, 8), stamp(NAMED))[0, 0]
    torch.testing.assert_close(got, expected.float(), atol=1e-5, rtol=0)


def phase(moment: datetime, period_seconds: int) -> float:
    return (int(moment.timestamp()) % period_seconds) / period_seconds


@pytest.mark.parametrize(("periods", "harmonics", "seconds"), [
    (None, 2, [86_400, 604_800]),  # the default: day and week, two harmonics
    (["hour"], 1, [3600]),
    (["week", "day"], 3, [604_800, 86_400]),  # columns in the order the periods are given
    (["year"], 1, [31_556_952]),  # the mean Gregorian year
])  # fmt: skip
def test_cyclic_adds_each_periods_harmonics_at_the_named_timestamp(periods, harmonics, seconds):
    """For each period p and harmonic k, (sin 2πk·φ, cos 2πk·φ), φ = (t mod p)/p; a projection (identity here)."""
    enc = build_encoder("cyclic", dim=2 * len(seconds) * harmonics, num_heads=1, periods=periods, harmonics=harmonics)
    with torch.no_grad():
        enc.proj.weight.copy_(torch.eye(enc.proj.weight.shape[0]))
    expected = []
    for period in seconds:
        for k in range(1, harmonics + 1):
            angle = 2 * math.pi * k * phase(NAMED, period)
            expected += [math.sin(angle), math.cos(angle)]
    got = enc.encode_input(torch.zeros(1, 1, len(expected)), stamp(NAMED))[0, 0]
    torch.testing.assert_close(got, torch.tensor(expected), atol=1e-6, rtol=0)
    # (13·60 + 47)/1440 of the day; Thursday is day 0 of the Unix week (1970-01-01 was a Thursday)
    assert phase(NAMED, 86_400) == pytest.approx((13 * 60 + 47) / 1440)
    assert phase(NAMED, 604_800) == pytest.approx((13 * 60 + 47) / (7 * 1440))


@pytest.mark.parametrize("k", [1, 4, 16])
def test_time2vec_terms_at_the_named_timestamp(k):
    """Kazemi et al. 2019, eq. 1: ω₀τ + φ₀ on days since the sequence's first step, sin(ω_iτ + φ_i) on days since
    2000-01-01; ω_i as constructed, 2π over periods log-spaced from half a day to a year. The angles reach 10⁵ rad
    (24 years of days at the half-day period): float32 angles would miss by up to 0.008 rad."""
    enc = build_encoder("time2vec", dim=k + 1, num_heads=1, k=k)
    periods = [0.5 * (365.25 / 0.5) ** (i / (k - 1)) for i in range(k)] if k > 1 else [0.5]
    torch.testing.assert_close(
        enc.omega.detach().double(), torch.tensor([2 * math.pi / p for p in periods]).double(), rtol=1e-6, atol=0
    )
    with torch.no_grad():
        enc.proj.weight.copy_(torch.eye(k + 1))
        enc.phi.copy_(torch.linspace(0.1, 0.9, k))
        enc.linear.copy_(torch.tensor([0.25, -1.0]))
    later = NAMED + timedelta(hours=30)
    out = enc.encode_input(torch.zeros(1, 2, k + 1), stamp(NAMED, later))[0]
    for row, moment, since_first in zip(out, (NAMED, later), (0.0, 1.25), strict=True):
        days = (moment - datetime(2000, 1, 1, tzinfo=UTC)).total_seconds() / 86_400
        omega, phi = enc.omega.detach().double().tolist(), enc.phi.detach().double().tolist()
        expected = [0.25 * since_first - 1.0] + [math.sin(days * w + p) for w, p in zip(omega, phi, strict=True)]
        torch.testing.assert_close(row.double(), torch.tensor(expected).double(), atol=1e-5, rtol=0)
