"""Calendar fields and time features from Unix seconds (pinned against pandas)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from poslab.positions.timestamps import calendar_fields, time_features


def seconds(*stamps: str) -> torch.Tensor:
    index = pd.DatetimeIndex(list(stamps))
    return torch.tensor((index - pd.Timestamp("1970-01-01")) // pd.Timedelta("1s"))


def test_known_timestamp_2016_07_01_is_a_friday():
    f = {k: v.item() for k, v in calendar_fields(seconds("2016-07-01 00:00")).items()}
    assert f == {"minute": 0, "hour": 0, "weekday": 4, "day": 1, "month": 7, "day_of_year": 183, "year": 2016}


def test_calendar_matches_pandas_over_two_centuries():
    rng = np.random.default_rng(0)
    stamps = rng.integers(-2_000_000_000, 4_000_000_000, 5000)
    index = pd.to_datetime(stamps, unit="s")
    fields = calendar_fields(torch.tensor(stamps))
    expected = {
        "minute": index.minute,
        "hour": index.hour,
        "weekday": index.day_of_week,
        "day": index.day,
        "month": index.month,
        "day_of_year": index.day_of_year,
        "year": index.year,
    }
    for name, values in expected.items():
        assert np.array_equal(fields[name].numpy(), np.asarray(values)), name


def test_time_features_follow_gluonts_and_depend_on_frequency():
    t = seconds("2016-07-01 23:45")
    hourly = time_features(t, 3600)[0]
    assert hourly.tolist() == pytest.approx([23 / 23 - 0.5, 4 / 6 - 0.5, 0 / 30 - 0.5, 182 / 365 - 0.5])
    minutely = time_features(t, 900)[0]
    assert minutely.shape == (5,) and minutely[0].item() == pytest.approx(45 / 59 - 0.5)
    assert (time_features(seconds("2016-01-01", "2016-12-31 23:00"), 3600).abs() <= 0.5).all()


def test_frequency_aliases_of_pandas_3():
    """pandas 3 rejects 'H' / 'T'; the loaders use 'h' / 'min' / '30min'."""
    assert len(pd.date_range("2000-06-05", periods=3, freq="30min")) == 3
    assert len(pd.date_range("2000-06-05", periods=3, freq="h")) == 3
