"""The forecasting run's end-of-run evaluation: error by horizon and by weekday x hour, the baselines on the
same windows, the irregular-sampling probe and — for the query layout — horizon / lookback extrapolation."""

from __future__ import annotations

import torch

from poslab.evaluation.probes import Buckets, Evaluation, Probe
from poslab.modalities.timeseries.baselines import fit_ridge, forecast_errors, stack_windows
from poslab.modalities.timeseries.data import seasonal_steps
from poslab.modalities.timeseries.probes import drop_steps, irregular_lookback
from poslab.positions.timestamps import calendar_fields
from poslab.track import plots

WEEKDAYS = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]


class ForecastReport(Evaluation):
    """Lightning test passes over the test windows: the model's error per quarter of the horizon
    (``test/mse@h1-12``) and by weekday x hour of the target, each baseline's (``baseline/<name>_mse``);
    the irregular-sampling probe (``probe/irregular_mse``); for the query layout, 2x the horizon and 2x the
    lookback with the baselines recomputed for those windows (``extrap/mse@2xH``, ``extrap/baseline_…``)."""

    BUCKETS = 4

    def __init__(self, eval_cfg: dict) -> None:
        super().__init__()
        self.ridge = float(eval_cfg["ridge"])
        self.drop = float(eval_cfg["irregular_drop"])
        self.notes: list[list[str]] = []

    def probes(self, trainer, task):

        dm = trainer.datamodule
        seasons = seasonal_steps(dm.step_seconds)
        lookback, horizon = dm.lookback, dm.horizon
        for season, period in seasons.items():
            if lookback < period:
                why = f"the lookback ({lookback} steps) is shorter than a {season} ({period} steps)"
                self.notes.append([f"baseline/seasonal_naive_{season}_mse", why])
        baselines = self._baselines(dm, seasons)
        edges = torch.linspace(0, horizon, self.BUCKETS + 1).round().long().tolist()

        def on_test_windows(batch):
            error = task.forecast_error(batch)
            out = {f"test/mse@h{a + 1}-{b}": error[:, a:b].pow(2) for a, b in zip(edges[:-1], edges[1:], strict=True)}
            out["test/mse_by_weekday_hour"] = Buckets(error.pow(2).mean(-1), _weekday_hour(batch), 7 * 24)
            for name, err in baselines(batch).items():
                out[f"baseline/{name}_mse"], out[f"baseline/{name}_mae"] = err.pow(2), err.abs()
            return out

        yield Probe("{}", dm.loader("test"), on_test_windows, dm.as_batch, tag="test")
        yield Probe(
            "probe/irregular_{}",
            dm.loader("test", irregular_lookback(lookback, self.drop)),
            lambda batch: {"mse": task.forecast_error(batch).pow(2)},
            lambda batch: drop_steps(dm.as_batch(batch), lookback),
            tag="irregular",
        )
        if task.model.layout != "query":
            why = f"layout={task.model.layout} has a fixed input and output size; use model.layout=query"
            self.notes += [["extrap/mse@2xH", why], ["extrap/mse@2xL", why]]
            return
        for key, shape in (("2xH", (None, 2 * horizon)), ("2xL", (2 * lookback, None))):
            longer = self._baselines(dm, seasons, *shape)

            def on_longer(batch, longer=longer):
                out = {f"baseline_{name}_mse": err.pow(2) for name, err in longer(batch).items()}
                return {"mse": task.forecast_error(batch).pow(2), **out}

            yield Probe(f"extrap/{{}}@{key}", dm.loader("test", *shape), on_longer, dm.as_batch, tag=key)

    def _baselines(self, dm, seasons, lookback=None, horizon=None):
        """batch -> baseline name -> forecast error, the ridge map fitted (closed form) on the training
        windows of this shape first."""

        train_past, train_future, _ = stack_windows(dm.windows("train", lookback, horizon))
        weights = fit_ridge(train_past, train_future, self.ridge)
        return lambda batch: forecast_errors(batch["past"], batch["future"], seasons, weights)

    def summarize(self, trainer, task, results) -> None:
        test = next(result for probe, result in results if probe.tag == "test")
        metrics = {**self.run_metrics, **test.metrics}
        rows = [["model", metrics.get("test/mse"), metrics.get("test/mae")]]
        names = [k.removeprefix("baseline/").removesuffix("_mse") for k in test.metrics if k.startswith("baseline/")
                 and k.endswith("_mse")]  # fmt: skip
        rows += [[n, metrics[f"baseline/{n}_mse"], metrics[f"baseline/{n}_mae"]] for n in names]
        self.add_table(trainer, "test/vs_baselines", ["forecaster", "mse", "mae"], rows)
        cells = test.buckets.get("test/mse_by_weekday_hour")
        if cells is not None:
            grid = torch.tensor([float("nan") if v is None else v for v in cells]).view(7, 24)
            table = [[WEEKDAYS[d], h, cells[d * 24 + h]] for d in range(7) for h in range(24)]
            self.add_table(trainer, "test/mse_by_weekday_hour", ["weekday", "hour", "mse"], table)
            title = f"{task.encoder.name}: test MSE by weekday and hour of the target"
            self.add_figure(trainer, "test/mse_by_weekday_hour", plots.weekday_hour_heatmap(grid, WEEKDAYS, title))
        notes = self.notes + [[probe.key.format("mse"), result.note] for probe, result in results if result.note]
        if notes:
            self.add_table(trainer, "notes", ["metric", "why it is missing"], notes)


def _weekday_hour(batch) -> torch.Tensor:
    """The weekday x hour cell (0..167) of every target step."""

    fields = calendar_fields(batch["pos_future"].times)
    return fields["weekday"] * 24 + fields["hour"]
