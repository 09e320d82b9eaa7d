"""A run as one object: who it is (its name, directory, W&B run, rank), what it runs (its config), its phases
(fit, test, the end-of-run evaluations, ``summary.json``) and how it continues after a kill.

:func:`poslab.run.train.train` and :func:`~poslab.run.train.evaluate` drive it top to bottom. A run owns its
directory while it holds it (one writer: :mod:`poslab.run.locks`), always finishes its W&B run (two runs in one
process never merge) and writes ``summary.json`` last, atomically: a directory without one did not finish.
"""

from __future__ import annotations

import math
import secrets
import signal
import sys
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.callbacks import LearningRateMonitor
from lightning.pytorch.utilities.exceptions import SIGTERMException
from omegaconf import DictConfig

from poslab import __version__, interrupts
from poslab.config.composition import to_dict
from poslab.data.resumable import ResumableTraining
from poslab.errors import (
    FILESYSTEM_ERRORS,
    ConfigError,
    DataError,
    PoslabError,
    RunInterrupted,
    RunStopped,
    first_line,
    memory_problem,
    os_error_line,
)
from poslab.evaluation.probes import run_evaluations
from poslab.run import cluster
from poslab.run.callbacks import (
    EncoderFigure,
    FiniteLoss,
    FitMetrics,
    History,
    PeriodicLast,
    RunCheckpoint,
    StepTimer,
    TrainingPosition,
)
from poslab.run.checkpoints import recorded_digest, verify_digest
from poslab.run.policy import config_hash, setting_hash
from poslab.run.presets import RunFacts, best_checkpoint, build_callbacks
from poslab.run.resume import (
    FIT_RECORD,
    LAST_CHECKPOINT,
    read_record,
    relaunched_config,
    resumable_launch_run,
    write_record,
)
from poslab.run.rundir import (
    create_run_dir,
    launch_wandb_id,
    remove_run_dir,
    resume_command,
    run_lock,
    run_name,
)
from poslab.run.trainer import build_trainer, raised_by_lightning
from poslab.track.loggers import (
    build_loggers,
    define_summaries,
    finish_logger,
    log_destinations,
    log_final,
    resolve_wandb_mode,
    sweep_run_id,
    wandb_info,
)
from poslab.track.summary import RunSummary


@dataclass
class Run:
    """One run. ``kind``: ``train`` or ``eval``; ``resuming``: it continues a run from its ``last.ckpt``;
    ``source``: the checkpoint an evaluation re-tests. ``logger`` and ``trainer`` exist while it is held."""

    cfg: DictConfig
    kind: str
    name: str
    dir: Path
    started: float = field(default_factory=time.perf_counter)
    resuming: bool = False
    source: Path | None = None
    wandb_id: str | None = None
    loggers: list = field(default_factory=list)  # the preset's first, then logger.also's
    trainer: L.Trainer | None = None

    @property
    def logger(self) -> Any:
        """The preset's logger (W&B's run, when there is one), or None."""
        return self.loggers[0] if self.loggers else None

    # -- who it is --------------------------------------------------------------------------------------------
    @classmethod
    def for_training(cls, cfg: DictConfig, started: float) -> Run:
        """``resume=<dir>``: that run (its directory and config checked by ``resume.resumed_config``); a requeued
        SLURM job or a restarted torchrun launch: its own unfinished run; else a new directory."""
        if cfg.resume:
            return cls(cfg, "train", Path(cfg.resume).name, Path(cfg.resume), started, resuming=True)
        name = run_name(cfg, config_hash(to_dict(cfg), ignore=("run",)))
        run_dir = (Path(cfg.run.root) / cfg.modality / name).resolve()
        if not resumable_launch_run(run_dir):
            return cls(cfg, "train", name, create_run_dir(cfg, name), started)
        if not cluster.is_child_rank():
            print(f"resuming {run_dir}: this {cluster.current().kind} job's run, left unfinished", flush=True)
        return cls(relaunched_config(cfg, run_dir), "train", name, run_dir, started, resuming=True)

    @classmethod
    def for_evaluation(cls, cfg: DictConfig, source: Path, named: bool, started: float) -> Run:
        """An evaluation of checkpoint ``source`` in ``<training run>/eval/<name>`` (``run.name`` when ``named``,
        else a fresh one); a name that already holds an evaluation is refused."""
        name = cfg.run.name if named else f"eval-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
        run_dir = source.resolve().parent.parent / "eval" / name
        if (run_dir / "summary.json").exists():
            raise PoslabError(f"{run_dir} already holds an evaluation; choose another run.name")
        run_dir.mkdir(parents=True, exist_ok=True)
        return cls(cfg, "eval", name, run_dir, started, source=source)

    @property
    def logged_name(self) -> str:
        """The name the logger shows: an evaluation's names its training run."""
        return self.name if self.kind == "train" else f"{self.dir.parent.parent.name}-eval-{self.name}"

    @contextmanager
    def held(self) -> Iterator[Run]:
        """The run's directory locked (training), its record written (rank 0 of a new run) and its logger
        started; the logger is always finished. Bad input removes a new training run's directory (an interrupted
        or stopped one keeps its checkpoints, a resumed one its earlier work); an evaluation that does not finish
        leaves nothing."""
        training = self.kind == "train"
        with (
            cluster.children_join(self.name) if training else nullcontext(),
            run_lock(self.dir) if training else nullcontext(),
        ):
            if training:
                self._record()
            exit_code = 0
            try:
                setting = setting_hash(to_dict(self.cfg))
                if not self.cfg.trainer.get("fast_dev_run"):  # Lightning logs nothing in a fast_dev_run
                    self.loggers = build_loggers(
                        self.cfg, self.dir, self.logged_name, self.kind, self.wandb_id, setting
                    )
                if not cluster.is_child_rank():
                    print(
                        f"poslab: {self.kind} run in {self.dir}; {log_destinations(self.loggers, self.cfg)}", flush=True
                    )
                yield self
            except BaseException as exc:
                exit_code = getattr(exc, "exit_code", 1)  # an interrupted run's 128 + signal
                if self.kind == "eval" or (_bad_input(exc) and not self.resuming):
                    remove_run_dir(self.dir)
                if training and isinstance(exc, OSError) and exc.errno in FILESYSTEM_ERRORS:
                    raise self.stopped_by_the_disk(exc) from None
                raise
            finally:
                for logger in self.loggers:
                    finish_logger(logger, exit_code)

    def _record(self) -> None:
        """The W&B run id: a resumed run's own, a sweep trial's the agent's, a launch's derived from its directory
        (every rank, every requeue), else a fresh one; rank 0 of a new run writes ``config.yaml`` and ``run.json``."""
        if self.resuming:
            self.wandb_id = read_record(self.dir).get("wandb_id")
            return
        local = cluster.current().kind == "local"
        self.wandb_id = sweep_run_id() or (secrets.token_hex(4) if local else launch_wandb_id(self.dir))
        if not cluster.is_child_rank():
            write_record(self.dir, self.cfg, self.wandb_id)

    # -- its phases ---------------------------------------------------------------------------------------------
    def fit(self, task: L.LightningModule, datamodule: L.LightningDataModule) -> RunCheckpoint:
        """Fit (from ``checkpoints/last.ckpt`` when resuming); returns the best-checkpoint callback. A signal ends
        it with the line that says how to continue; running out of memory keeps the checkpoints so far."""
        monitor, mode = task.monitor
        facts = RunFacts(monitor, mode, self.cfg.optim.lr)
        best = RunCheckpoint(
            dirpath=self.dir / "checkpoints", **best_checkpoint(self.cfg.get("checkpoint") or {}, facts)
        )
        self.periodic = PeriodicLast(self.dir / "checkpoints", self.cfg.run.checkpoint_every_n_steps)
        self.fitted = FitMetrics(self.dir / FIT_RECORD, best)
        callbacks = [FiniteLoss(), best, self.periodic, TrainingPosition(), StepTimer(), History(), EncoderFigure()]
        callbacks.append(self.fitted)
        if self.loggers:
            callbacks.append(LearningRateMonitor(logging_interval="step"))
        callbacks = build_callbacks(self.cfg.callbacks, facts, callbacks)
        self.trainer = build_trainer(self.cfg, self.dir, self.loggers, callbacks)
        define_summaries(self.logger, monitor, mode)
        last = self.dir / LAST_CHECKPOINT
        if self.resuming and (note := verify_digest(last)):
            print(note, file=sys.stderr)
        try:
            with warnings.catch_warnings():
                if isinstance(datamodule, ResumableTraining):  # it restores its loader's position itself, which
                    # Lightning's mid-epoch check (a loader with state_dict) does not see
                    warnings.filterwarnings("ignore", ".*your dataloader is not resumable.*")
                self.trainer.fit(task, datamodule=datamodule, ckpt_path=str(last) if self.resuming else None,
                                 weights_only=False)  # fmt: skip
            interrupted = self.trainer.received_sigterm  # Lightning may also end the fit quietly after the signal
        except (SIGTERMException, RunInterrupted):
            interrupted = True
        except (MisconfigurationException, ValueError) as exc:  # settings Lightning judges once it sees the data
            if isinstance(exc, ValueError) and not raised_by_lightning(exc):
                raise
            raise ConfigError(f"trainer settings rejected: {first_line(exc)}") from None
        except (MemoryError, RuntimeError) as exc:
            stopped = out_of_memory(
                exc,
                f"training ran out of memory at step {self.trainer.global_step}",
                "the checkpoints so far are kept: lower data.batch_size or the model's sizes",
            )
            if stopped is None:
                raise
            raise stopped from None
        if interrupted or interrupts.received():
            raise self.interrupted(f"at step {self.trainer.global_step}")
        return best

    def test_best(self, task: L.LightningModule, datamodule: L.LightningDataModule, best: RunCheckpoint) -> RunSummary:
        """Test the best checkpoint, then :meth:`finish`. A run resumed after its fit logs no fit metric again:
        they are read back from what the fit recorded."""
        try:
            recorded = self.fitted.recorded(self.trainer.global_step) or {}
            fit_metrics = {**recorded.get("metrics", {}), **scalar_metrics(self.trainer.callback_metrics)}
            # Lightning logs step metrics every trainer.log_every_n_steps: the last step's values, as summary.json has
            log_final(self.trainer, {k: v for k, v in fit_metrics.items() if k.startswith("train/")}, columns=False)
            path = best.best_model_path or None
            if recorded.get("best_checkpoint"):  # resumed after the fit: the last.ckpt it read predates the best
                path = str(self.dir / FIT_RECORD.parent / recorded["best_checkpoint"])
            if self.resuming and path and (note := verify_digest(Path(path))):  # an earlier process wrote it
                print(note, file=sys.stderr)
            tested = self.trainer.test(task, datamodule=datamodule, ckpt_path=path, verbose=False, weights_only=True)
            interrupts.check("testing")
            metrics = {**fit_metrics, **(tested[0] if tested else {})}
            logged = set(metrics)  # through Lightning's loops
            score = recorded.get("best_score", best.best_model_score)
            if score is not None:
                metrics[f"{best.monitor}_best"] = float(score)  # the metric the best checkpoint follows
            checkpoints = {"best": self._relative(path), "last": self._relative(self.periodic.last_model_path)}
            return self.finish(task, metrics, logged, checkpoints)
        except (SIGTERMException, RunInterrupted):
            raise self.interrupted("after training, while testing and evaluating") from None
        except (MemoryError, RuntimeError) as exc:  # an evaluation's data or lengths too large for the machine
            stopped = out_of_memory(
                exc,
                "testing or an end-of-run evaluation ran out of memory",
                f"the checkpoints are kept: lower the eval.* sizes and continue with {resume_command(self.dir)}",
            )
            if stopped is None:
                raise
            raise stopped from None

    def test(self, task: L.LightningModule, datamodule: L.LightningDataModule) -> RunSummary:
        """An evaluation: test the checkpoint's model on this config's data, then :meth:`finish`."""
        self.trainer = build_trainer(self.cfg, self.dir, self.loggers, [EncoderFigure()])
        define_summaries(self.logger, *task.monitor)
        metrics = self.trainer.test(task, datamodule=datamodule, verbose=False)[0]
        interrupts.check("testing")
        loss = metrics.get("test/loss", 0.0)
        if not math.isfinite(loss):  # weights damaged without a digest to tell (finite, but huge): not a result
            raise DataError(f"checkpoint {self.source} gives test/loss={loss}: its weights are damaged (or overflow "
                            "on this data); nothing was written")  # fmt: skip
        return self.finish(task, metrics, set(metrics), {"source": str(self.source)})

    def finish(self, task: L.LightningModule, metrics: dict, logged: set, checkpoints: dict) -> RunSummary:
        """The end-of-run evaluations (Lightning test passes), then ``summary.json``, written (rank 0 only) last
        and atomically. Every number it holds is logged under the same key: ``logged`` are those Lightning's
        loops logged; the rest (the best score, what callbacks measured, the parameter count, the wall time) is
        logged here."""
        evaluations = task.evaluations(self.cfg)
        evaluated = run_evaluations(self.trainer, task, evaluations, metrics)
        summary = self.summary(task, [*self.trainer.callbacks, *evaluations], {**metrics, **evaluated}, checkpoints)
        logged = {*logged, *evaluated}
        log_final(self.trainer, {k: v for k, v in summary.logged_scalars().items() if k not in logged})
        if self.trainer.is_global_zero:
            summary.write(self.dir)
        return summary

    def summary(self, task: L.LightningModule, reporters: list, metrics: dict, checkpoints: dict) -> RunSummary:
        """The run's :class:`~poslab.track.summary.RunSummary`: ``metrics`` plus what every reporter added."""
        merged: dict[str, dict[str, Any]] = {"metrics": dict(metrics), "tables": {}, "figures": {}, "history": {},
                                             "curves": {}}  # fmt: skip
        for reporter in reporters:
            for section, values in getattr(reporter, "report", {}).items():
                merged[section].update(values)
        cfg = self.cfg
        return RunSummary(
            kind=self.kind,
            run_name=self.name,
            run_dir=str(self.dir),
            modality=cfg.modality,
            task=cfg.task.name,
            encoder=cfg.encoder.name,
            seed=cfg.seed,
            config=to_dict(cfg),
            metrics=dict(sorted(merged["metrics"].items())),
            tables=merged["tables"],
            figures=merged["figures"],
            history=merged["history"],
            curves=merged["curves"],
            checkpoints=checkpoints,
            checkpoint_sha256={k: recorded_digest(self.dir / v) for k, v in checkpoints.items() if k != "source" and v},
            num_params=sum(p.numel() for p in task.parameters()),
            wall_time_s=round(time.perf_counter() - self.started, 2),
            wandb=wandb_info(self.trainer.logger, resolve_wandb_mode(cfg.logger.mode)),
            versions={"poslab": __version__, "torch": torch.__version__, "lightning": L.__version__},
            created=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        )

    # -- how it ends when stopped ---------------------------------------------------------------------------------
    def interrupted(self, where: str) -> RunInterrupted:
        """The one line an interrupted run ends with: the signal, where, and how to continue (exit 128 + signal).
        Under SLURM, SIGUSR1 (``#SBATCH --signal=USR1@90``) requeues the job, which resumes this run."""
        number = interrupts.received() or signal.SIGTERM
        name = signal.Signals(number).name
        if not (self.dir / LAST_CHECKPOINT).is_file():
            return RunInterrupted(f"interrupted by {name} {where}, before any checkpoint; run the same command again",
                                  number)  # fmt: skip
        if number == signal.SIGUSR1 and cluster.under_slurm() and not cluster.is_child_rank():
            requeued = cluster.requeue(cluster.slurm_job())
            return RunInterrupted(f"interrupted by {name} {where}; checkpoint saved; {requeued}", number)
        return RunInterrupted(
            f"interrupted by {name} {where}; checkpoint saved, continue with: {resume_command(self.dir)}", number
        )

    def stopped_by_the_disk(self, exc: OSError) -> RunStopped:
        """A full disk, a quota, a read-only or immutable folder mid-run: the file and the cause, what is kept, and
        the line that continues once the disk is fixed."""
        what = os_error_line(exc if exc.filename else OSError(exc.errno, exc.strerror, str(self.dir)))
        if not (self.dir / LAST_CHECKPOINT).is_file():
            return RunStopped(f"{what}; no checkpoint was saved yet: fix the disk and run the same command again")
        return RunStopped(f"{what}; {LAST_CHECKPOINT} is kept: fix the disk, then continue with: "
                          f"{resume_command(self.dir)}")  # fmt: skip

    def _relative(self, path: str | None) -> str | None:
        return str(Path(path).relative_to(self.dir)) if path else None


def _bad_input(exc: BaseException) -> bool:
    return isinstance(exc, PoslabError) and not isinstance(exc, RunStopped)  # an interrupt is no PoslabError


def out_of_memory(exc: BaseException, what: str, then: str) -> RunStopped | None:
    """An allocation that failed, as one line: what ran out, how much one allocation asked for, what is kept
    (None for any other error)."""
    asked = memory_problem(exc)
    return None if asked is None else RunStopped(f"{what} (one allocation asked for {asked}); {then}")


def scalar_metrics(metrics: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items() if getattr(v, "numel", lambda: 1)() == 1}
