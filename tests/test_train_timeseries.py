"""Forecasting runs end to end: every encoder, every layout, baselines, probes, calendar vs index."""

from __future__ import annotations

from pathlib import Path

import pytest

from poslab.config import compose
from poslab.encoders import available_encoders
from poslab.errors import PoslabError
from poslab.train import train

SUMMARY_METRICS = (
    "test/mse",
    "test/mae",
    "baseline/seasonal_naive_day_mse",
    "baseline/repeat_last_mse",
    "baseline/linear_mse",
)  # the week baseline needs a week of lookback: the tiny runs have two days


@pytest.mark.parametrize("encoder", available_encoders("timeseries"))
def test_every_timeseries_encoder_trains_a_few_steps(tiny_ts, encoder):
    summary = train(compose([*tiny_ts, f"encoder={encoder}"]))
    assert set(SUMMARY_METRICS) <= set(summary["metrics"])
    assert summary["metrics"]["test/mse"] > 0
    notes = dict(summary["tables"]["notes"]["rows"])
    assert "shorter than a week" in notes["baseline/seasonal_naive_week_mse"]


@pytest.mark.parametrize("layout", ["step", "patch", "query"])
def test_layouts_and_what_each_reports(tiny_ts, layout):
    summary = train(compose([*tiny_ts, "encoder=rope+calendar", f"model.layout={layout}"]))
    metrics = summary["metrics"]
    assert {"test/mse@h1-6", "test/mse@h19-24"} <= set(metrics)
    assert "probe/irregular_mse" in metrics  # every layout: the past is sampled irregularly, not shortened
    probes = {"extrap/mse@2xH", "extrap/mse@2xL"}
    if layout == "query":
        assert probes <= set(metrics)
        assert "extrap/baseline_linear_mse@2xH" in metrics
    else:
        assert not probes & set(metrics)
        notes = {row[0] for row in summary["tables"]["notes"]["rows"]}
        assert probes <= notes
    rows = summary["tables"]["test/mse_by_weekday_hour"]["rows"]
    assert len(rows) == 7 * 24
    assert (Path(summary["run_dir"]) / summary["figures"]["test/mse_by_weekday_hour"]).exists()


@pytest.mark.slow
def test_a_calendar_beats_index_positions_when_value_depends_on_the_weekday(tiny_ts):
    """A 1-day lookback cannot tell Thursday->Friday (1->1) from Friday->Saturday (1->-1);
    the calendar of the future steps can."""
    base = [o for o in tiny_ts if not o.startswith(("trainer.", "data.lookback", "data.horizon"))]
    common = [*base, "data.lookback=24", "data.horizon=24", "model.revin=false", "model.dim=32"]
    common += ["trainer.max_epochs=3", "trainer.enable_progress_bar=false", "optim.lr=3e-3"]
    calendar = train(compose([*common, "encoder=calendar", "run.name=calendar"]))
    index = train(compose([*common, "encoder=rope", "run.name=index"]))
    assert calendar["metrics"]["test/mse"] < 0.5 * index["metrics"]["test/mse"]


def test_highway_adds_a_linear_path_for_fixed_layouts(tiny_ts):
    summary = train(compose([*tiny_ts, "encoder=cyclic", "model.layout=patch", "model.highway=true"]))
    assert summary["metrics"]["test/mse"] > 0
    with pytest.raises(PoslabError, match="model.highway needs a fixed lookback and horizon"):
        train(compose([*tiny_ts, "model.layout=query", "model.highway=true"]))


def test_the_etth1_experiment_composes_the_standard_benchmark():
    cfg = compose(["experiment=etth1"])
    assert (cfg.modality, cfg.data.name, cfg.data.lookback, cfg.data.horizon) == ("timeseries", "etth1", 336, 96)
    assert cfg.data.features == "multivariate" and cfg.model.layout == "patch"


def test_multivariate_series_train_channel_independently(tiny_ts, weekday_csv, tmp_path):
    import pandas as pd

    frame = pd.read_csv(weekday_csv)
    frame["z"] = -frame["y"] + 0.5
    path = tmp_path / "two.csv"
    frame.to_csv(path, index=False)
    overrides = [o if not o.startswith("data.path") else f"data.path={path}" for o in tiny_ts]
    for layout in ("patch", "query"):
        summary = train(compose([*overrides, f"model.layout={layout}", f"run.name={layout}"]))
        assert summary["metrics"]["test/mse"] > 0


@pytest.mark.parametrize("encoder", ["alibi", "t5"])
def test_relative_biases_take_the_form_of_the_models_attention(encoder):
    """The forecaster attends both ways: ALiBi must be symmetric in i - j (the causal form favours keys after
    the query), T5 must give keys after the query their own buckets (the causal form puts them all in the
    distance-0 bucket); the causal LM keeps the causal forms; an explicit setting wins."""
    import torch

    from poslab.config import to_dict
    from poslab.tasks.forecasting import ForecastTask
    from poslab.tasks.language_model import LanguageModel

    forecast_cfg = to_dict(compose(["modality=timeseries", f"encoder={encoder}"]))
    forecaster = ForecastTask(forecast_cfg, lookback=48, horizon=24, channels=1, context={})
    text = LanguageModel(to_dict(compose(["modality=text", f"encoder={encoder}"])), vocab_size=8, context={})
    assert forecaster.encoder.bidirectional is True and text.encoder.bidirectional is False
    pos = torch.arange(6)
    if encoder == "alibi":
        bias = forecaster.encoder.attention_bias(pos, pos)
        torch.testing.assert_close(bias, bias.transpose(-1, -2))
        assert (bias[..., 0, 1:] < 0).all()  # keys after the query: penalised by distance, not favoured
    else:
        from poslab.encoders.t5 import t5_buckets

        after = t5_buckets(torch.arange(1, 6), True, 32, 128)
        assert len(set(after.tolist())) == 5 and 0 not in after.tolist()  # their own buckets, one per distance
        assert t5_buckets(torch.arange(1, 6), False, 32, 128).tolist() == [0] * 5  # what the causal form did
    overridden = to_dict(compose(["modality=timeseries", f"encoder={encoder}", "encoder.bidirectional=false"]))
    assert ForecastTask(overridden, lookback=48, horizon=24, channels=1, context={}).encoder.bidirectional is False
