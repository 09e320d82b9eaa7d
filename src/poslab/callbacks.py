"""Lightning callbacks that measure, draw and report.

A :class:`Reporter` fills ``self.report`` (``metrics``, ``tables``,
``figures``); :func:`poslab.train.train` merges every reporter's report into
``summary.json``. Adding an end-of-run evaluation is adding a reporter.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from matplotlib.figure import Figure

from poslab import plots
from poslab.data.resumable import ResumableLoader
from poslab.evaluation.similarity import position_similarity
from poslab.loggers import log_figure, log_line_chart, log_table
from poslab.rundir import record_digest


class Reporter(L.Callback):
    """A callback whose results go into ``summary.json``; end-of-test reporters override :meth:`after_test`."""

    def __init__(self) -> None:
        self.report: dict[str, dict[str, Any]] = {"metrics": {}, "tables": {}, "figures": {}}

    def on_test_end(self, trainer, pl_module) -> None:
        # Once, by DDP rank 0, on the whole data (no collective: the extras call the model directly).
        # They evaluate at many lengths, sizes and encoder variants: compiling each shape would cost
        # more than it saves (and hit dynamo's recompile limit), so a compiled backbone runs eagerly.
        if not trainer.is_global_zero:
            return
        with torch.compiler.set_stance("force_eager"):
            self.after_test(trainer, pl_module)

    def after_test(self, trainer, pl_module) -> None:
        """Evaluate after testing and fill ``self.report``; default: nothing."""

    def add_figure(self, trainer: L.Trainer, key: str, fig: Figure) -> None:
        """PNG under ``<run>/figures/``, logged under ``key``, recorded relative to the run."""
        if trainer.is_global_zero:
            run_dir = Path(trainer.default_root_dir)
            path = run_dir / "figures" / f"{key.replace('/', '_')}.png"
            log_figure(trainer.logger, key, fig, path)
            self.report["figures"][key] = str(path.relative_to(run_dir))
        plots.close(fig)

    def add_table(self, trainer: L.Trainer, key: str, columns: list[str], rows: list[list[Any]]) -> None:
        if trainer.is_global_zero:
            log_table(trainer.logger, key, columns, rows)
        self.report["tables"][key] = {"columns": columns, "rows": rows}


class FiniteLoss(L.Callback):
    """Stops a run whose training loss turns NaN / inf, naming the step, before a checkpoint saves it.

    Reading the loss waits for the device, so on an accelerator it is read only on logging steps
    (``trainer.log_every_n_steps``), where Lightning reads it anyway; on the CPU, every step.
    """

    def on_before_backward(self, trainer, pl_module, loss) -> None:
        # before the backward pass and the optimiser step: the weights never see the bad loss
        if loss.device.type != "cpu" and trainer.global_step % trainer.log_every_n_steps:
            return
        if not torch.isfinite(loss.detach()).all():
            from poslab.errors import NonFiniteLoss

            raise NonFiniteLoss(
                f"the training loss is {float(loss)} at step {trainer.global_step}; the run stopped there and keeps "
                "its checkpoints from before it (try a lower optim.lr)"
            )


class DigestedCheckpoint(ModelCheckpoint):
    """A ``ModelCheckpoint`` that records each file's SHA-256 beside it (``best.ckpt.sha256``), so
    ``poslab eval`` and ``resume=`` can tell a corrupted or replaced checkpoint from the one saved."""

    def _save_checkpoint(self, trainer, filepath: str) -> None:
        super()._save_checkpoint(trainer, filepath)
        if trainer.is_global_zero:
            record_digest(filepath)


class PeriodicLast(DigestedCheckpoint):
    """``last.ckpt`` every ``every_n_steps`` training steps, at the end, and when the run is interrupted.

    ``every_n_steps`` None: a tenth of the run's steps, so a kill loses at most
    about 10 % of it. Only ``last.ckpt`` is kept (the best model has its own callback).
    """

    def __init__(self, dirpath, every_n_steps: int | None = None) -> None:
        super().__init__(dirpath=dirpath, save_top_k=0, save_last=True, every_n_train_steps=every_n_steps or 0)
        self.auto = every_n_steps is None

    @property
    def state_key(self) -> str:
        # ModelCheckpoint's key is built from its settings, and on_train_start changes one of them:
        # a fixed key lets a resumed run find this callback's state.
        return "PeriodicLast"

    def on_train_start(self, trainer, pl_module) -> None:
        if self.auto:
            self._every_n_train_steps = max(1, int(trainer.estimated_stepping_batches) // 10)

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        """A SIGTERM or Ctrl-C keeps the work done so far (a crash from a bug does not overwrite it)."""
        from lightning.pytorch.utilities.exceptions import SIGTERMException

        if isinstance(exception, SIGTERMException | KeyboardInterrupt) and not trainer.sanity_checking:
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))


class TrainingPosition(L.Callback):
    """What a resumed run needs beyond the model and optimiser to continue exactly like an uninterrupted one.

    Saved with every checkpoint: the global torch RNG states (dropout, augmentation,
    randomized positions and a shuffled loader's order draw from them), restored as
    soon as the checkpoint is read — before Lightning builds the training loader,
    which then redraws its epoch's order (:mod:`poslab.data.resumable`). Also
    tells that loader how many batches training consumed (it runs ahead).
    """

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        loader = trainer.train_dataloader
        if isinstance(loader, ResumableLoader):
            loader.consumed(batch_idx + 1, epoch_over=batch_idx + 1 >= trainer.num_training_batches)

    def state_dict(self) -> dict:
        state = {"cpu": torch.get_rng_state()}
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            state["cuda"] = torch.cuda.get_rng_state_all()
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        """Nothing between here and the first resumed batch draws from the global RNG (evaluation loaders
        have their own generator; the sanity check runs in eval mode), as between two steps of the run."""
        torch.set_rng_state(state_dict["cpu"])
        if "cuda" in state_dict and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state_dict["cuda"])


class EncoderFigure(Reporter):
    """At the start of a run: the position-only attention scores of the encoder."""

    def __init__(self) -> None:
        super().__init__()
        self._done = False

    def _draw(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if self._done:
            return
        self._done = True
        pos, length, grid = trainer.datamodule.similarity_positions()
        scores = position_similarity(module.encoder, pos, length, module.device).cpu()
        title = f"encoder '{module.encoder.name}': position-only attention scores"
        self.add_figure(trainer, "encoder/position_similarity", plots.similarity_figure(scores, grid, title))

    def on_fit_start(self, trainer, pl_module) -> None:
        self._draw(trainer, pl_module)

    def on_test_start(self, trainer, pl_module) -> None:
        self._draw(trainer, pl_module)


class StepTimer(Reporter):
    """Median wall time of a training step (data transfer included), in ms."""

    warmup_steps = 5

    def __init__(self) -> None:
        super().__init__()
        self._times: list[float] = []
        self._start = 0.0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._start = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._times.append(time.perf_counter() - self._start)

    def on_train_end(self, trainer, pl_module) -> None:
        times = self._times[self.warmup_steps :] or self._times
        if times:
            self.report["metrics"]["perf/train_step_ms"] = 1000 * statistics.median(times)


class History(Reporter):
    """Logged scalars against the global step, so a report can draw training curves without W&B.

    Under the keys they are logged with: every task logs ``train/loss`` per step
    and evaluation metrics per epoch, none both (which would add ``_step`` /
    ``_epoch`` keys)."""

    def __init__(self) -> None:
        super().__init__()
        self.report["history"] = {}

    def _record(self, trainer: L.Trainer, prefix: str) -> None:
        step = trainer.global_step
        for key, value in trainer.callback_metrics.items():
            if not key.startswith(prefix) or key.endswith("_best") or "/lr" in key:
                continue
            if not isinstance(value, torch.Tensor) or value.numel() != 1:
                continue
            series = self.report["history"].setdefault(key, [])
            if series and series[-1][0] == step:
                series[-1][1] = float(value)
            else:
                series.append([step, float(value)])

    def state_dict(self) -> dict:
        return {"history": self.report["history"]}

    def load_state_dict(self, state_dict: dict) -> None:
        """A resumed run continues the curves of the run it resumes."""
        self.report["history"] = state_dict["history"]

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step % max(trainer.log_every_n_steps, 1) == 0:
            self._record(trainer, "train/")

    def on_validation_end(self, trainer, pl_module) -> None:
        if not trainer.sanity_checking:  # the latest training loss too, so short runs get a curve
            self._record(trainer, "val/")
            self._record(trainer, "train/")


class PerClassAccuracy(Reporter):
    """After testing: accuracy per class as a W&B table and a bar chart."""

    def after_test(self, trainer, pl_module) -> None:
        values = pl_module.per_class_accuracy
        if values is None:
            return
        names = list(trainer.datamodule.class_names)
        self.add_table(
            trainer, "test/acc_per_class", ["class", "acc"], [[n, float(v)] for n, v in zip(names, values, strict=True)]
        )
        fig = plots.per_class_figure(names, values, f"test accuracy per class ({pl_module.encoder.name})")
        self.add_figure(trainer, "test/acc_per_class", fig)


class LengthGeneralization(Reporter):
    """After testing: metrics at each multiple of the training context (see :mod:`poslab.evaluation.lengen`)."""

    def __init__(self, eval_cfg: dict) -> None:
        super().__init__()
        self.multiples = list(eval_cfg["multiples"])
        self.extensions = list(eval_cfg["rope_scaling"])

    def after_test(self, trainer, pl_module) -> None:
        from poslab.evaluation.lengen import evaluate_lengths

        datamodule = trainer.datamodule
        result = evaluate_lengths(
            pl_module.backbone,
            lambda m, generated: pl_module.lengen_metrics(datamodule.lengen_loader(m), generated),
            datamodule.context,
            self.multiples,
            self.extensions,
        )
        self.report["metrics"].update(result.metrics())
        metric = next(iter(result.rows[0]["values"]), "loss") if result.rows else "loss"
        rows = [[r["variant"], r["multiple"], r["length"], r["values"].get(metric), r["note"]] for r in result.rows]
        self.add_table(trainer, f"lengen/{metric}", ["variant", "multiple", "length", metric, "note"], rows)
        lengths = [m * result.context for m in result.multiples()]
        series = result.series(metric)
        if trainer.is_global_zero:
            log_line_chart(trainer.logger, f"lengen/{metric}_curve", lengths, series, f"{metric} vs context length")
        title = f"{pl_module.encoder.name}: {metric} vs length (trained at {result.context})"
        self.add_figure(
            trainer, f"lengen/{metric}", plots.length_figure(lengths, series, metric, result.context, title)
        )
        self._depth_heatmap(trainer, pl_module, result, lengths)

    def _depth_heatmap(self, trainer, pl_module, result, lengths) -> None:
        """Accuracy by answer depth x length (associative recall): the lost-in-the-middle picture."""
        grid = [r["values"].get("depth_acc") for r in result.rows if r["variant"] == "base"]
        if not any(grid):
            return
        buckets = len(next(g for g in grid if g))
        rows = [
            [length, b / buckets, acc[b] if acc else None]
            for length, acc in zip(lengths, grid, strict=True)
            for b in range(buckets)
        ]
        self.add_table(trainer, "lengen/acc_by_depth", ["length", "depth", "acc"], rows)
        title = f"{pl_module.encoder.name}: accuracy by depth of the answer"
        self.add_figure(trainer, "lengen/acc_by_depth", plots.depth_heatmap(lengths, grid, title))


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
        from poslab.data.timeseries import seasonal_steps
        from poslab.evaluation.baselines import all_baselines, stack_windows
        from poslab.evaluation.probes import drop_steps, irregular_lookback

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


class ResolutionReport(Reporter):
    """After testing a vision model: test accuracy at other image sizes, raw and rescaled coordinates."""

    def __init__(self, cfg) -> None:
        super().__init__()
        self.data_cfg = cfg.data
        self.sizes = list(cfg.eval.image_sizes)
        self.notes: list[list[str]] = []

    def after_test(self, trainer, pl_module) -> None:
        if not self.sizes:
            return
        from omegaconf import OmegaConf

        from poslab.data.vision import VisionDataModule
        from poslab.errors import PoslabError

        rows = []
        for size in self.sizes:
            for mode in ("raw", "rescaled"):
                key = f"resolution/acc@{size}/{mode}"
                data = OmegaConf.merge(self.data_cfg, {"image_size": size, "coords": mode})
                dm = VisionDataModule(data, train_data=self.data_cfg)
                dm.setup()
                try:
                    accuracy = pl_module.accuracy_on(dm.as_batch(b) for b in dm.test_dataloader())
                except PoslabError as exc:  # a learned table has no rows for raw indices past it
                    self.notes.append([key, str(exc)])
                    rows.append([size, mode, None])
                    continue
                self.report["metrics"][key] = accuracy
                rows.append([size, mode, accuracy])
        self.add_table(trainer, "resolution/acc", ["image_size", "coords", "acc"], rows)
        if self.notes:
            self.add_table(trainer, "resolution/notes", ["metric", "why it is missing"], self.notes)
