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
from matplotlib.figure import Figure

from poslab import plots
from poslab.evaluation.similarity import position_similarity
from poslab.loggers import log_figure, log_line_chart, log_table


class Reporter(L.Callback):
    """A callback whose results go into ``summary.json``."""

    def __init__(self) -> None:
        self.report: dict[str, dict[str, Any]] = {"metrics": {}, "tables": {}, "figures": {}}

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
        scores = position_similarity(module.encoder, pos, length)
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


class PerClassAccuracy(Reporter):
    """After testing: accuracy per class as a W&B table and a bar chart."""

    def on_test_end(self, trainer, pl_module) -> None:
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

    def on_test_end(self, trainer, pl_module) -> None:
        from poslab.evaluation.lengen import evaluate_lengths

        datamodule = trainer.datamodule
        result = evaluate_lengths(
            pl_module.backbone,
            lambda m: pl_module.lengen_metrics(datamodule.lengen_loader(m)),
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
