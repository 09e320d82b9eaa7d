"""The text run's end-of-test extras: the length study (loss and accuracy at multiples of the context)."""

from __future__ import annotations

from poslab import plots
from poslab.callbacks import Reporter
from poslab.loggers import log_line_chart


class LengthGeneralization(Reporter):
    """After testing: metrics at each multiple of the training context (see :mod:`poslab.modalities.text.lengen`)."""

    def __init__(self, eval_cfg: dict) -> None:
        super().__init__()
        self.multiples = list(eval_cfg["multiples"])
        self.extensions = list(eval_cfg["rope_scaling"])

    def after_test(self, trainer, pl_module) -> None:
        from poslab.modalities.text.lengen import evaluate_lengths

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
