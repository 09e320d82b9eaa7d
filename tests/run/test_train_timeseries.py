"""Forecasting runs end to end: every encoder, every layout, baselines, probes, calendar vs index."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from poslab.config.composition import compose
from poslab.encoders import available_encoders
from poslab.errors import PoslabError
from poslab.run.train import train

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


def forecaster(layout: str, **options):
    """A small untrained forecaster (lookback 48, horizon 24), in evaluation mode."""
    import torch

    from poslab.encoders import build_encoder
    from poslab.modalities.timeseries.model import Forecaster

    torch.manual_seed(0)
    encoder = build_encoder("rope", dim=16, num_heads=2, max_len=72)
    model = Forecaster(encoder, layout=layout, lookback=48, horizon=24, dim=16, depth=1, num_heads=2, **options)
    return model.eval()


def window_positions():
    """Step positions of a 48-step past and its 24-step future."""
    import torch

    from poslab.positions import Positions

    return Positions(steps=torch.arange(48)), Positions(steps=torch.arange(48, 72))


@pytest.mark.parametrize("layout", ["step", "patch"])
def test_highway_adds_a_linear_lookback_to_horizon_map_to_the_transformer(layout):
    """LSTNet's highway: forecast = transformer path + W·past, W a [horizon, lookback] matrix per channel."""
    import torch

    model = forecaster(layout, highway=True, revin=False, patch_len=8, stride=8)
    assert isinstance(model.highway, torch.nn.Linear) and model.highway.bias is None
    weight = model.highway.weight.detach().clone()
    assert weight.shape == (24, 48)
    past = torch.randn(2, 48, 3)
    pos_past, pos_future = window_positions()
    linear = torch.einsum("hl,blc->bhc", weight.double(), past.double()).float()  # each channel's W·x
    with torch.no_grad():
        full = model(past, pos_past, pos_future)
        model.highway.weight.zero_()  # the transformer path alone
        transformer = model(past, pos_past, pos_future)
        model.highway.weight.copy_(weight)
        model.head.weight.zero_(), model.head.bias.zero_()  # the highway alone
        highway_only = model(past, pos_past, pos_future)
    assert transformer.abs().mean() > 0.01 and linear.abs().mean() > 0.01
    torch.testing.assert_close(full, transformer + linear, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(highway_only, linear, atol=1e-5, rtol=1e-5)


def test_highway_with_revin_maps_the_normalised_window_and_is_off_for_queries():
    """With RevIN the highway maps the standardised window; its forecast is de-standardised with the rest."""
    import torch

    from poslab.config.composition import to_dict
    from poslab.modalities.timeseries.task import ForecastTask

    model = forecaster("patch", highway=True, revin=True, patch_len=8, stride=8)
    with torch.no_grad():
        model.head.weight.zero_(), model.head.bias.zero_()
    past = 3.0 + 2.0 * torch.randn(2, 48, 3)
    mean = past.mean(dim=1, keepdim=True)
    std = (past.var(dim=1, keepdim=True, unbiased=False) + 1e-5).sqrt()
    expected = torch.einsum("hl,blc->bhc", model.highway.weight.detach(), (past - mean) / std) * std + mean
    with torch.no_grad():
        torch.testing.assert_close(model(past, *window_positions()), expected, atol=1e-4, rtol=1e-5)
    assert forecaster("patch", highway=False).highway is None
    assert forecaster("step", highway=None).highway is not None  # automatic: fixed sizes get one
    assert forecaster("query", highway=None).highway is None
    cfg = to_dict(compose(["modality=timeseries", "encoder=cyclic", "model.layout=patch", "model.highway=true"]))
    task = ForecastTask(cfg, lookback=48, horizon=24, channels=1, context={"step_seconds": 3600})
    assert task.model.highway.weight.shape == (24, 48)
    cfg["model"]["layout"] = "query"
    with pytest.raises(PoslabError, match="model.highway needs a fixed lookback and horizon"):
        ForecastTask(cfg, lookback=48, horizon=24, channels=1, context={"step_seconds": 3600})


def test_the_etth1_experiment_composes_the_standard_benchmark():
    cfg = compose(["experiment=etth1"])
    assert (cfg.modality, cfg.data.name, cfg.data.lookback, cfg.data.horizon) == ("timeseries", "etth1", 336, 96)
    assert cfg.data.features == "multivariate" and cfg.model.layout == "patch"


@pytest.mark.parametrize("layout", ["step", "patch", "query"])
def test_multivariate_series_are_forecast_channel_independently(tiny_ts, weekday_csv, tmp_path, layout):
    """PatchTST's channel independence, on windows of a two-column CSV as training sees them: changing one
    channel's past leaves the other's forecast unchanged, and each channel's forecast is what the same weights
    give that channel alone (its own RevIN statistics, its window's timestamps)."""
    import pandas as pd
    import torch

    from poslab.data import build_datamodule
    from poslab.tasks import build_task

    frame = pd.read_csv(weekday_csv)
    frame["z"] = -frame["y"] + 0.1 * (frame.index % 7)
    path = tmp_path / "two.csv"
    frame.to_csv(path, index=False)
    overrides = [o if not o.startswith("data.path") else f"data.path={path}" for o in tiny_ts]
    cfg = compose([*overrides, "encoder=rope+calendar", f"model.layout={layout}", "model.highway=false"])
    datamodule = build_datamodule(cfg)
    datamodule.setup("fit")
    assert datamodule.channels == 2
    torch.manual_seed(0)
    model = build_task(cfg, datamodule).model.eval()
    batch = datamodule.as_batch(next(iter(datamodule.loader("test"))))
    past = batch["past"][:4]
    pos_past = replace(batch["pos_past"], times=batch["pos_past"].times[:4])  # windows at different times
    pos_future = replace(batch["pos_future"], times=batch["pos_future"].times[:4])
    assert pos_past.times.shape == (4, 48) and not torch.equal(pos_past.times[0], pos_past.times[1])
    with torch.no_grad():
        forecast = model(past, pos_past, pos_future)
        assert forecast.shape == (4, 24, 2)
        for channel in (0, 1):
            alone = model(past[..., channel : channel + 1], pos_past, pos_future)
            torch.testing.assert_close(forecast[..., channel : channel + 1], alone, atol=1e-5, rtol=1e-4)
        changed = past.clone()
        changed[..., 0] = 5 * torch.randn_like(changed[..., 0]) - 2
        other = model(changed, pos_past, pos_future)
    torch.testing.assert_close(other[..., 1], forecast[..., 1], atol=1e-5, rtol=1e-4)
    assert (other[..., 0] - forecast[..., 0]).abs().max() > 1e-2


@pytest.mark.parametrize("encoder", ["alibi", "t5"])
def test_relative_biases_take_the_form_of_the_models_attention(encoder):
    """The forecaster attends both ways: ALiBi must be symmetric in i - j (the causal form favours keys after
    the query), T5 must give keys after the query their own buckets (the causal form puts them all in the
    distance-0 bucket); the causal LM keeps the causal forms; an explicit setting wins."""
    import torch

    from poslab.config.composition import to_dict
    from poslab.modalities.text.task import LanguageModel
    from poslab.modalities.timeseries.task import ForecastTask

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
