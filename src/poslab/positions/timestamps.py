"""Calendar fields from Unix timestamps, in torch (so encoders run on any device).

Timestamps are int64 seconds since 1970-01-01 UTC — what the time-series data
modules put in ``Positions.times``. Dates follow Howard Hinnant's
``civil_from_days`` (proleptic Gregorian), so no pandas on the hot path.

GluonTS / Time-Series-Library time features (``timefeatures.py``) are the
linear scalings below, each in [−0.5, 0.5] — not cyclic: 23:00 and 00:00 are
far apart in them (a pitfall the ``cyclic`` encoder avoids).
"""

from __future__ import annotations

import torch

SECONDS_PER_DAY = 86_400


def civil_from_days(days: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(year, month 1..12, day 1..31) of day numbers since 1970-01-01."""
    z = days + 719_468
    era = torch.div(z, 146_097, rounding_mode="floor")
    doe = z - era * 146_097
    yoe = torch.div(doe - doe // 1460 + doe // 36_524 - doe // 146_096, 365, rounding_mode="floor")
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = torch.where(mp < 10, mp + 3, mp - 9)
    year = yoe + era * 400 + (month <= 2).long()
    return year, month, day


def days_from_civil(year: torch.Tensor, month: torch.Tensor, day: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`civil_from_days`."""
    year = year - (month <= 2).long()
    era = torch.div(year, 400, rounding_mode="floor")
    yoe = year - era * 400
    doy = (153 * torch.where(month > 2, month - 3, month + 9) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146_097 + doe - 719_468


def calendar_fields(times: torch.Tensor) -> dict[str, torch.Tensor]:
    """minute, hour, weekday (Monday = 0), day (1..31), month (1..12), day_of_year (1..366), year."""
    seconds = times.long()
    days = torch.div(seconds, SECONDS_PER_DAY, rounding_mode="floor")
    in_day = seconds - days * SECONDS_PER_DAY
    year, month, day = civil_from_days(days)
    january_first = days_from_civil(year, torch.ones_like(month), torch.ones_like(day))
    return {
        "minute": (in_day // 60) % 60,
        "hour": in_day // 3600,
        "weekday": (days + 3) % 7,  # 1970-01-01 was a Thursday
        "day": day,
        "month": month,
        "day_of_year": days - january_first + 1,
        "year": year,
    }


def time_features(times: torch.Tensor, step_seconds: int) -> torch.Tensor:
    """GluonTS features for the data frequency, ``[..., F]`` in [−0.5, 0.5].

    Hourly data: hour of day, day of week, day of month, day of year; finer
    data adds minute of hour first (Time-Series-Library ``timefeatures.py``).
    """
    f = calendar_fields(times)
    columns = [
        f["hour"] / 23.0 - 0.5,
        f["weekday"] / 6.0 - 0.5,
        (f["day"] - 1) / 30.0 - 0.5,
        (f["day_of_year"] - 1) / 365.0 - 0.5,
    ]
    if step_seconds < 3600:
        columns.insert(0, f["minute"] / 59.0 - 0.5)
    return torch.stack(columns, dim=-1).float()


def feature_count(step_seconds: int) -> int:
    return 5 if step_seconds < 3600 else 4


#: Periods of the cyclic features, in seconds (a year is the mean Gregorian year).
PERIODS = {"hour": 3600, "day": 86_400, "week": 604_800, "year": 31_556_952}
