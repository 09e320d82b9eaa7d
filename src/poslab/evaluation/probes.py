"""End-of-run evaluations as Lightning test loops.

An :class:`Evaluation` (a length study, accuracy at other image sizes, forecasting baselines) is a list of
:class:`Probe` passes plus a small step after them. Each probe is one ``trainer.test`` over its own loader,
with the model as the probe needs it (an encoder swapped for an extended copy), so its metrics are
torchmetrics states that DDP syncs, logged with ``self.log``: every logger receives them, and
``trainer.callback_metrics`` and ``summary.json`` hold the same numbers. The step after the loops
(:meth:`Evaluation.summarize`) only turns those numbers into tables, curves and figures.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSamplerWrapper
from lightning.pytorch.trainer.states import RunningStage
from lightning.pytorch.utilities.data import _update_dataloader
from matplotlib.figure import Figure
from torch import nn
from torch.utils.data import DataLoader
from torchmetrics import MeanMetric, Metric

from poslab import interrupts
from poslab.errors import PoslabError
from poslab.track import plots
from poslab.track.loggers import hide_from_panels, log_curve, log_figure, log_final, log_table


@dataclass
class Buckets:
    """Values averaged per bucket (accuracy by the answer's depth, error by weekday × hour): a table, not a
    metric. ``index`` (long, in ``[0, size)``) has ``values``' shape."""

    values: torch.Tensor
    index: torch.Tensor
    size: int


class BucketMean(Metric):
    """The mean of the values that fell in each bucket (NaN for an empty one), summed over DDP ranks."""

    full_state_update = False

    def __init__(self, size: int) -> None:
        super().__init__()
        self.add_state("sums", torch.zeros(size, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("counts", torch.zeros(size, dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, values: torch.Tensor, index: torch.Tensor) -> None:
        index = index.flatten().long()
        self.sums.index_add_(0, index, values.flatten().double())
        self.counts.index_add_(0, index, torch.ones_like(index, dtype=torch.float64))

    def compute(self) -> torch.Tensor:
        return torch.where(self.counts > 0, self.sums / self.counts.clamp(min=1), torch.nan)


def _identity(batch: Any) -> Any:
    return batch


@dataclass
class Probe:
    """One evaluation pass over ``loader``.

    ``measure(batch)`` returns, per metric name, the per-item values whose mean is the metric (a loss per
    token, a hit per answer, a squared error per element) or :class:`Buckets`; the metric is logged as
    ``key.format(name)``. ``as_batch`` turns a loader's item (already on the device) into the batch
    ``measure`` reads; ``variant()`` is the model as this pass needs it (a context manager). ``tag`` is
    the evaluation's own label for the pass.
    """

    key: str
    loader: Iterable
    measure: Callable[[Any], dict[str, Any]]
    as_batch: Callable[[Any], Any] = _identity
    variant: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext
    tag: Any = None


@dataclass
class ProbeResult:
    metrics: dict[str, float] = field(default_factory=dict)  # full keys
    buckets: dict[str, list[float | None]] = field(default_factory=dict)  # full keys
    note: str | None = None  # why the model could not run this pass (a learned table too short)

    def value(self, name_or_key: str) -> float | None:
        return self.metrics.get(name_or_key)


class ProbePass(L.LightningModule):
    """The Lightning module of one probe: the task's model, untouched, measured by ``probe.measure``."""

    def __init__(self, model: nn.Module, probe: Probe) -> None:
        super().__init__()
        self.model = model
        self.probe = probe
        self.means = nn.ModuleDict()
        self.bucket_means = nn.ModuleDict()
        self.slots: dict[str, str] = {}  # metric name -> module key (names may hold '.')
        self.result = ProbeResult()

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        return self.probe.as_batch(batch)

    def _metric(self, table: nn.ModuleDict, name: str, make: Callable[[], Metric]) -> tuple[str, Metric]:
        if name not in self.slots:
            self.slots[name] = f"m{len(self.slots)}"
        slot = self.slots[name]
        if slot not in table:
            table[slot] = make().to(self.device)
        return slot, table[slot]

    def test_step(self, batch: Any, batch_idx: int) -> None:
        if self.result.note is not None:
            return
        try:
            values = self.probe.measure(batch)
        except PoslabError as exc:  # e.g. a learned table shorter than this pass's sequences
            self.result.note = str(exc)
            return
        for name, value in values.items():
            if isinstance(value, Buckets):
                _, metric = self._metric(self.bucket_means, name, lambda v=value: BucketMean(v.size))
                metric.update(value.values.float(), value.index)
                continue
            slot, metric = self._metric(self.means, name, lambda: MeanMetric(nan_strategy="disable"))
            metric.update(value.detach().float().flatten())
            key = self.probe.key.format(name)
            self.log(key, metric, on_step=False, on_epoch=True, metric_attribute=f"means.{slot}")

    def on_test_epoch_end(self) -> None:
        keys = [self.probe.key.format(name) for name, slot in self.slots.items() if slot in self.means]
        hide_from_panels(self.trainer.logger, keys)  # before Lightning logs them at this epoch's end
        for name, slot in self.slots.items():
            if slot in self.bucket_means:
                values = self.bucket_means[slot].compute().tolist()  # every rank takes part (a sync)
                self.result.buckets[self.probe.key.format(name)] = [None if v != v else v for v in values]


def distributed(loader: Iterable, trainer: L.Trainer) -> Iterable:
    """Under DDP, each rank's share of ``loader`` without the padding Lightning's test sampler adds
    (a repeated item would change the mean), the order within each share kept."""

    if trainer.world_size <= 1 or not isinstance(loader, DataLoader) or not hasattr(loader.dataset, "__len__"):
        return loader

    sampler = UnrepeatedDistributedSamplerWrapper(
        loader.sampler, num_replicas=trainer.world_size, rank=trainer.global_rank, shuffle=False
    )
    return _update_dataloader(loader, sampler, mode=RunningStage.TESTING)


def run_probe(trainer: L.Trainer, model: nn.Module, probe: Probe) -> ProbeResult:
    """One ``trainer.test`` pass of ``probe``: its metrics as Lightning returns them, its buckets, or a note."""
    module = ProbePass(model, probe)
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(probe.variant())
        except PoslabError as exc:  # the variant cannot be made (a searched extension without room for its data)
            module.result.note = str(exc)
            return module.result
        logged = trainer.test(module, dataloaders=distributed(probe.loader, trainer), verbose=False)
    interrupts.check("an end-of-run evaluation")  # a signal in its last batch
    result = module.result
    if result.note is None:
        result.metrics = {k: float(v) for k, v in (logged[0] if logged else {}).items()}
    return result


class RunReport:
    """What a run's callbacks and evaluations add to ``summary.json`` (``metrics``, ``tables``, ``figures``);
    figures and tables go to the logger too."""

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

    def add_curve(self, trainer: L.Trainer, axis: str, points: dict[float, dict[str, float]]) -> None:
        """Curves against their own axis (x -> {key: y}), logged (:func:`poslab.track.loggers.log_curve`) and
        recorded as ``axis -> keys``, so a dashboard knows what to draw against what."""
        if not points:
            return
        log_curve(trainer, axis, points)
        keys = sorted({k for values in points.values() for k in values})
        self.report.setdefault("curves", {})[axis] = keys


class Evaluation(RunReport):
    """An end-of-run evaluation: :meth:`probes` run as Lightning test loops, then :meth:`summarize` makes
    tables and figures from their results (and may add derived metrics to ``self.report["metrics"]``,
    which are logged too). ``run_metrics``: what the run measured before (its test metrics)."""

    run_metrics: dict[str, float] = {}

    def probes(self, trainer: L.Trainer, task: L.LightningModule) -> Iterable[Probe]:
        return ()

    def summarize(self, trainer: L.Trainer, task: L.LightningModule, results: list[tuple[Probe, ProbeResult]]):
        """Tables, figures and curves from the probes' results (nothing by default)."""

    def add_notes(self, trainer: L.Trainer, key: str, results: list[tuple[Probe, ProbeResult]], name: str) -> None:
        """A table of the passes that could not run and why, by the key of their metric ``name``."""
        rows = [[probe.key.format(name), result.note] for probe, result in results if result.note]
        if rows:
            self.add_table(trainer, key, ["metric", "why it is missing"], rows)


@contextlib.contextmanager
def _without_progress_bar(trainer: L.Trainer) -> Iterator[None]:
    """Many short passes: a progress bar each (or, disabled, the blank line it ends with) would bury the
    run's output."""
    bar = trainer.progress_bar_callback
    if bar is not None:
        trainer.callbacks.remove(bar)
    try:
        yield
    finally:
        if bar is not None:
            trainer.callbacks.append(bar)


def run_evaluations(
    trainer: L.Trainer, task: L.LightningModule, evaluations: list[Evaluation], run_metrics: dict[str, float]
) -> dict[str, float]:
    """Every evaluation's probes, then its summary step; returns every metric they logged.

    They run at many lengths and sizes: compiling each shape would cost more than it saves (and reach
    dynamo's recompile limit), so a compiled backbone runs eagerly here."""
    metrics: dict[str, float] = {}
    with torch.compiler.set_stance("force_eager"), _without_progress_bar(trainer):
        for evaluation in evaluations:
            evaluation.run_metrics = dict(run_metrics)
            results = [(probe, run_probe(trainer, task, probe)) for probe in evaluation.probes(trainer, task)]
            for _, result in results:
                metrics.update(result.metrics)
            evaluation.summarize(trainer, task, results)
            derived = {k: v for k, v in evaluation.report["metrics"].items() if k not in metrics}
            log_final(trainer, derived)
            metrics.update(derived)
    trainer.callback_metrics.update({k: torch.tensor(v) for k, v in metrics.items()})
    return metrics
