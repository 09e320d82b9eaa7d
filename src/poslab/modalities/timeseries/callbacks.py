"""The forecasting run's end-of-test extras: baselines, error by horizon and by weekday x hour, probes."""

from __future__ import annotations

import torch

from poslab import plots
from poslab.callbacks import Reporter


class ForecastReport(Reporter):
    """After testing a forecaster: baselines, per-horizon error, weekday x hour error, the
    irregular-sampling probe and — for the query layout — horizon / lookback extrapolation."""

    BUCKETS = 4

    def __init__(self, eval_cfg: dict) -> None:
        super().__init__()
        self.ridge = float(eval_cfg["ridge"])
        self.drop = float(eval_cfg["irregular_drop"])
        self.notes: list[list[str]] = []

    def after_test(self, trainer, pl_module) -> None:
        from poslab.modalities.timeseries.baselines import all_baselines, stack_windows
        from poslab.modalities.timeseries.data import seasonal_steps
        from poslab.modalities.timeseries.probes import drop_steps, irregular_lookback

        dm = trainer.datamodule
        metrics = self.report["metrics"]
        seasons = seasonal_steps(dm.step_seconds)

        def forecast(split="test", lookback=None, horizon=None, transform=None):
            batches = (dm.as_batch(b) for b in dm.loader(split, lookback, horizon))
            return pl_module.predict_windows(map(transform, batches) if transform else batches)

        def baselines(lookback=None, horizon=None):
            past, future, _ = stack_windows(dm.windows("test", lookback, horizon))
            train_past, train_future, _ = stack_windows(dm.windows("train", lookback, horizon))
            return all_baselines(past, future, train_past, train_future, seasons, self.ridge)

        pred, target, times = forecast()
        model_mse = (pred - target).pow(2).mean().item()
        horizon = target.shape[1]
        edges = torch.linspace(0, horizon, self.BUCKETS + 1).round().long().tolist()
        for a, b in zip(edges[:-1], edges[1:], strict=True):
            metrics[f"test/mse@h{a + 1}-{b}"] = (pred[:, a:b] - target[:, a:b]).pow(2).mean().item()
        rows = [["model", model_mse, (pred - target).abs().mean().item()]]
        for name, err in baselines().items():
            metrics[f"baseline/{name}_mse"], metrics[f"baseline/{name}_mae"] = err["mse"], err["mae"]
            rows.append([name, err["mse"], err["mae"]])
        for season, period in seasons.items():
            if dm.lookback < period:
                why = f"the lookback ({dm.lookback} steps) is shorter than a {season} ({period} steps)"
                self.notes.append([f"baseline/seasonal_naive_{season}_mse", why])
        self.add_table(trainer, "test/vs_baselines", ["forecaster", "mse", "mae"], rows)
        self._weekday_hour(trainer, pl_module, pred, target, times)

        lookback = dm.lookback
        generator = torch.Generator().manual_seed(0)
        longer = irregular_lookback(lookback, self.drop)
        self._attempt(
            "probe/irregular_mse",
            lambda: forecast("test", longer, transform=lambda batch: drop_steps(batch, lookback, generator)),
        )
        if pl_module.model.layout != "query":
            why = f"layout={pl_module.model.layout} has a fixed input and output size; use model.layout=query"
            self.notes += [["extrap/mse@2xH", why], ["extrap/mse@2xL", why]]
        else:
            for key, shape in (("2xH", (None, 2 * horizon)), ("2xL", (2 * lookback, None))):
                for name, err in baselines(*shape).items():
                    metrics[f"extrap/baseline_{name}_mse@{key}"] = err["mse"]
                self._attempt(f"extrap/mse@{key}", lambda shape=shape: forecast("test", *shape))
        if self.notes:
            self.add_table(trainer, "notes", ["metric", "why it is missing"], self.notes)

    def _attempt(self, key: str, run) -> None:
        """The MSE of ``run()``'s forecast, or a note saying why the model cannot run it."""
        from poslab.errors import PoslabError

        try:
            pred, target, _ = run()
        except PoslabError as exc:  # e.g. a learned table shorter than the longer sequence
            self.notes.append([key, str(exc)])
            return
        self.report["metrics"][key] = (pred - target).pow(2).mean().item()

    def _weekday_hour(self, trainer, pl_module, pred, target, times) -> None:
        from poslab.timestamps import calendar_fields

        fields = calendar_fields(times)
        cell = (fields["weekday"] * 24 + fields["hour"]).flatten()
        error = (pred - target).pow(2).mean(-1).flatten()
        sums = torch.zeros(7 * 24).index_add_(0, cell, error.float())
        counts = torch.zeros(7 * 24).index_add_(0, cell, torch.ones_like(error.float()))
        grid = (sums / counts.clamp(min=1)).masked_fill(counts == 0, float("nan")).view(7, 24)
        names = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
        rows = [[names[d], h, None if grid[d, h].isnan() else grid[d, h].item()] for d in range(7) for h in range(24)]
        self.add_table(trainer, "test/mse_by_weekday_hour", ["weekday", "hour", "mse"], rows)
        title = f"{pl_module.encoder.name}: test MSE by weekday and hour of the target"
        self.add_figure(trainer, "test/mse_by_weekday_hour", plots.weekday_hour_heatmap(grid, names, title))
