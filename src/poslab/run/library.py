"""poslab's parts under a Trainer of your own: the data module and the task a config builds, the callbacks that
measure a run, and the end of a run (its evaluations, figures and ``summary.json``) as one call.

``poslab train`` is these plus a run directory, a lock, resume and its logger (:class:`poslab.run.run.Run`); a
project that drives Lightning itself takes what it needs from here (``examples/library/own_trainer.py``).
"""

from __future__ import annotations

import time
from pathlib import Path

import lightning as L
from omegaconf import DictConfig

from poslab.config.composition import compose
from poslab.run.callbacks import EncoderFigure, History, StepTimer
from poslab.run.run import Run, scalar_metrics
from poslab.run.train import build_parts
from poslab.track.summary import RunSummary


def build(overrides: list[str] | tuple[str, ...] = ()) -> tuple[DictConfig, L.LightningDataModule, L.LightningModule]:
    """The config ``poslab train <overrides>`` would run, its data module (set up for fitting) and its task (a
    ``LightningModule``): bad input is the same one line as on the command line, as a ``PoslabError``."""
    cfg = compose(list(overrides))
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    datamodule, task = build_parts(cfg)
    return cfg, datamodule, task


def reporting_callbacks() -> list[L.Callback]:
    """The callbacks whose measurements go into ``summary.json``: step time and throughput, the logged curves,
    the encoder's position-similarity figure."""
    return [StepTimer(), History(), EncoderFigure()]


def finish(trainer: L.Trainer, task: L.LightningModule, cfg: DictConfig, run_dir: str | Path,
           started: float | None = None) -> RunSummary:  # fmt: skip
    """After your ``trainer.fit`` (and ``trainer.test``, if you ran it): the modality's end-of-run evaluations
    (length generalisation, resolution, horizons … as Lightning test passes on ``trainer``), every reporting
    callback's measurements and figures, and ``<run_dir>/summary.json`` — what ``poslab report`` and ``poslab
    compare`` read. ``started``: ``time.perf_counter()`` at the start, for the wall time."""
    run_dir = Path(run_dir).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    run = Run(cfg, "train", run_dir.name, run_dir, started if started is not None else time.perf_counter(),
              trainer=trainer)  # fmt: skip
    metrics = scalar_metrics(trainer.callback_metrics)
    return run.finish(task, metrics, set(metrics), {"best": None, "last": None})
