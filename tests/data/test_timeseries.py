"""Time-series data: sources, the standard splits, scaling, windows and positions."""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd
import pytest
import torch

from poslab.config.composition import compose
from poslab.errors import DataError
from poslab.modalities.timeseries import sources as timeseries_sources
from poslab.modalities.timeseries.data import TimeSeriesDataModule
from poslab.modalities.timeseries.probes import drop_steps, irregular_lookback
from poslab.modalities.timeseries.sources import ETT_COLUMNS
from tests.conftest import SHARED_DATA


def datamodule(*overrides: str) -> TimeSeriesDataModule:
    dm = TimeSeriesDataModule(compose(["modality=timeseries", *overrides]).data)
    dm.setup()
    return dm


@pytest.fixture(scope="module")
def fake_etth1(tmp_path_factory):
    """A generated CSV shaped like ETTh1: the same columns, 17,420 hourly rows from 2016-07-01."""
    root = tmp_path_factory.mktemp("ett")
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.normal(size=(17_420, 7)).cumsum(axis=0), columns=list(ETT_COLUMNS))
    frame.insert(0, "date", pd.date_range("2016-07-01 00:00", periods=17_420, freq="h").strftime("%Y-%m-%d %H:%M:%S"))
    path = root / "ETTh1.csv"
    frame.to_csv(path, index=False)
    return root, hashlib.sha256(path.read_bytes()).hexdigest(), frame


def test_taylor_default_split_and_timestamps():
    dm = datamodule()
    assert dm.series.values.shape == (4032, 1) and dm.step_seconds == 1800
    assert dm.series.borders == (2822, 3225, 4032)
    first = pd.Timestamp(int(dm.times[0]), unit="s")
    assert first == pd.Timestamp("2000-06-05 00:00") and first.day_name() == "Monday"
    train = dm.values[:2822]
    assert train.mean().abs() < 1e-5 and (train.std(unbiased=False) - 1).abs() < 1e-4
    assert {s: len(dm.windows(s)) for s in ("train", "val", "test")} == {"train": 2439, "val": 356, "test": 760}


def test_ett_split_boundaries_and_scaling(fake_etth1, monkeypatch):
    root, digest, frame = fake_etth1
    monkeypatch.setitem(timeseries_sources.ETT_SHA256, "ETTh1", digest)
    dm = datamodule("data=etth1", f"data.root={root}", "data.lookback=96", "data.horizon=24")
    assert dm.series.borders == (8640, 11520, 14400) and dm.channels == 7
    raw = frame[list(ETT_COLUMNS)].to_numpy()
    np.testing.assert_allclose(dm.mean, raw[:8640].mean(axis=0))
    np.testing.assert_allclose(dm.values[0].numpy(), ((raw[0] - raw[:8640].mean(0)) / raw[:8640].std(0)), rtol=1e-5)
    val, test = dm.windows("val"), dm.windows("test")
    assert val.start == 8640 - 96 and len(val) == 11520 - 24 - 8640 + 1
    assert test.start == 11520 - 96 and test[len(test) - 1][1].shape == (24, 7)
    last_target_end = test.start + len(test) - 1 + 96 + 24
    assert last_target_end == 14400
    uni = datamodule("data=etth1", f"data.root={root}", "data.features=univariate")
    np.testing.assert_allclose(uni.series.values[:, -1], raw[:, -1])  # OT is the target column
    assert uni.channels == 1


def test_ettm1_splits_by_months_of_15_minute_rows(tmp_path, monkeypatch):
    """ETTm1: the same 12 / 4 / 4 months as ETTh1, at 4 rows an hour (Informer's borders x 4)."""
    rows = 20 * 30 * 24 * 4 + 100
    rng = np.random.default_rng(1)
    frame = pd.DataFrame(rng.normal(size=(rows, 7)).cumsum(axis=0), columns=list(ETT_COLUMNS))
    frame.insert(0, "date", pd.date_range("2016-07-01", periods=rows, freq="15min").strftime("%Y-%m-%d %H:%M:%S"))
    frame.to_csv(tmp_path / "ETTm1.csv", index=False)
    monkeypatch.setitem(
        timeseries_sources.ETT_SHA256, "ETTm1", hashlib.sha256((tmp_path / "ETTm1.csv").read_bytes()).hexdigest()
    )
    dm = datamodule("data=ettm1", f"data.root={tmp_path}", "data.lookback=96", "data.horizon=24")
    assert dm.series.borders == (34560, 46080, 57600) and dm.channels == 7 and dm.step_seconds == 900


def test_a_changed_ett_file_fails_its_checksum(fake_etth1):
    root, _, _ = fake_etth1
    with pytest.raises(DataError, match="ETTh1.csv fails its checksum"):
        datamodule("data=etth1", f"data.root={root}")


@pytest.mark.skipif(not (SHARED_DATA / "ETTh1.csv").exists(), reason="no ../shared/data")
def test_real_etth1_from_the_shared_root_needs_no_download():
    dm = datamodule("data=etth1", f"data.root={SHARED_DATA}", "data.download=false")
    assert dm.series.values.shape == (17_420, 7)
    assert pd.Timestamp(int(dm.times[0]), unit="s") == pd.Timestamp("2016-07-01 00:00")
    assert dm.step_seconds == 3600


def test_windows_carry_steps_and_timestamps():
    dm = datamodule()
    batch = dm.as_batch(next(iter(dm.loader("test"))))
    past, future = batch["pos_past"], batch["pos_future"]
    assert torch.equal(past.steps, torch.arange(336)) and torch.equal(future.steps, torch.arange(336, 384))
    assert torch.all(past.times[:, 1:] - past.times[:, :-1] == 1800)
    assert torch.all(future.times[:, 0] - past.times[:, -1] == 1800)


def test_irregular_probe_moves_index_positions_not_timestamps():
    dm = datamodule()
    longer = irregular_lookback(336, 0.2)
    assert longer == 420
    raw = next(iter(dm.loader("test", lookback=longer)))
    batch = dm.as_batch(raw)
    keep = 336
    probed = drop_steps(batch, keep)
    assert torch.equal(drop_steps(batch, keep)["past"], probed["past"])  # the same draw every time
    # a window keeps the same steps in any batch: drawn from its own timestamp, not the batch's order
    alone = drop_steps(dm.as_batch([t[3:4] for t in raw]), keep)
    torch.testing.assert_close(alone["pos_past"].times[0], probed["pos_past"].times[3])
    assert not torch.equal(
        probed["pos_past"].times[0] - probed["pos_past"].times[0, 0],
        probed["pos_past"].times[1] - probed["pos_past"].times[1, 0],
    )  # each window its own
    assert probed["past"].shape[1] == keep
    assert torch.equal(probed["pos_past"].steps, torch.arange(keep))  # recounted: now wrong
    times = probed["pos_past"].times
    assert torch.all(times[:, 1:] > times[:, :-1]) and (times[:, 1:] - times[:, :-1]).max() > 1800  # gaps kept
    assert set(times[0].tolist()) <= set(batch["pos_past"].times[0].tolist())  # true timestamps
    value_at = dict(zip(batch["pos_past"].times[0].tolist(), batch["past"][0, :, 0].tolist(), strict=True))
    assert [value_at[t] for t in times[0].tolist()] == probed["past"][0, :, 0].tolist()
    assert torch.equal(probed["pos_future"].times, batch["pos_future"].times)
    assert torch.equal(probed["pos_future"].steps, torch.arange(keep, keep + 48))


HOURS = [f"2020-01-01 {h:02d}:00" for h in range(6)]


@pytest.mark.parametrize(
    ("dates", "y", "message"),
    [
        (HOURS[:2] + HOURS[3:], [1.0] * 5, r"line 4: date 2020-01-01 03:00:00 does not follow 2020-01-01 01:00:00 by"),
        (HOURS[::-1], [1.0] * 6, r"line 3: date 2020-01-01 04:00:00 does not follow 2020-01-01 05:00:00 by the"),
        (HOURS[:3] + HOURS[2:5], [1.0] * 6, r"line 5: date 2020-01-01 02:00:00 does not follow 2020-01-01 02:00:00"),
        (HOURS, [1.0, 2.0, float("nan"), 4.0, 5.0, 6.0], r"line 4: column 'y' is nan \(not a number\)"),
        (HOURS, [1.0, float("inf"), 3.0, 4.0, 5.0, 6.0], r"line 3: column 'y' is inf \(not a number\)"),
        ([h + "+01:00" for h in HOURS], [1.0] * 6, r"line 2: date 2020-01-01 00:00:00\+01:00 carries a time zone"),
    ],
    ids=["a gap", "reversed", "a duplicate", "nan", "inf", "time zone"],
)
def test_a_bad_csv_is_one_line_naming_the_line_and_the_problem(tmp_path, dates, y, message):
    pd.DataFrame({"date": dates, "y": y}).to_csv(tmp_path / "s.csv", index=False)
    with pytest.raises(DataError, match=f"^{tmp_path / 's.csv'}, {message}") as caught:
        datamodule("data=csvfile", f"data.path={tmp_path / 's.csv'}")
    assert "\n" not in str(caught.value)


def test_the_calendar_a_batch_carries_is_that_of_its_named_timestamps(fake_etth1, monkeypatch):
    """ETTh1's first row is Friday 2016-07-01 00:00 (day 183 of a leap year): the first training window's
    first step says so in every calendar field and GluonTS feature an encoder reads, its 31st step is Saturday
    06:00 and its first target (lookback 96 h later) Tuesday 2016-07-05 00:00 — written out by hand, so a
    calendar shifted by a day or an hour is caught."""
    from poslab.positions.timestamps import calendar_fields, time_features

    root, digest, _ = fake_etth1
    monkeypatch.setitem(timeseries_sources.ETT_SHA256, "ETTh1", digest)
    dm = datamodule("data=etth1", f"data.root={root}", "data.lookback=96", "data.horizon=24")
    batch = dm.as_batch(tuple(t.unsqueeze(0) for t in dm.windows("train")[0]))
    past, future = batch["pos_past"].times[0], batch["pos_future"].times[0]
    named = {
        (past, 0): {"year": 2016, "month": 7, "day": 1, "weekday": 4, "hour": 0, "minute": 0, "day_of_year": 183},
        (past, 30): {"year": 2016, "month": 7, "day": 2, "weekday": 5, "hour": 6, "minute": 0, "day_of_year": 184},
        (future, 0): {"year": 2016, "month": 7, "day": 5, "weekday": 1, "hour": 0, "minute": 0, "day_of_year": 187},
    }
    for (times, index), fields in named.items():
        got = {k: int(v) for k, v in calendar_fields(times[index]).items()}
        assert got == fields, (index, got)
    features = time_features(past[:1], 3600)[0].tolist()  # hour/23, weekday/6, (day-1)/30, (doy-1)/365, - 0.5
    assert features == pytest.approx([-0.5, 4 / 6 - 0.5, -0.5, 182 / 365 - 0.5], abs=1e-6)
