"""``train(cfg) -> summary`` and ``evaluate(ckpt, overrides) -> summary``.

Each does a whole run from a composed config — it creates the run directory,
writes checkpoints, figures and logs there, logs to W&B (or another logger)
and returns the summary; the CLI only parses, composes and prints the result,
and tests call these directly. Each run owns its directory, its W&B run
(always finished, so two runs in one process never merge) and writes
``summary.json`` last, atomically: a run directory without one did not finish.
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import sys
import time
import traceback
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.callbacks import LearningRateMonitor, RichProgressBar
from lightning.pytorch.utilities.exceptions import SIGTERMException
from omegaconf import DictConfig

from poslab.evaluation.probes import run_evaluations
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
from poslab.run.checkpoints import DigestedCheckpointIO

try:  # a private class: where Lightning moved it, the Trainer judges the device settings itself
    from lightning.pytorch.trainer.connectors.accelerator_connector import _AcceleratorConnector
except ImportError:
    _AcceleratorConnector = None

from poslab import __version__, interrupts
from poslab.config.composition import config_hash, recompose, to_dict
from poslab.config.presets import RunFacts, build_callbacks
from poslab.config.trainer import TRAINER_DEFAULTS
from poslab.data import build_datamodule
from poslab.errors import ConfigError, PoslabError, RunInterrupted, RunStopped, first_line, memory_problem
from poslab.run import cluster
from poslab.run.checkpoints import recorded_digest, verify_digest
from poslab.run.memory import check_fits
from poslab.run.resume import FIT_RECORD, LAST_CHECKPOINT, read_record, relaunched_config, write_record
from poslab.run.rundir import (
    RUN_NAME_ENV,
    create_run_dir,
    is_child_rank,
    launch_wandb_id,
    remove_run_dir,
    resumable_launch_run,
    run_lock,
    run_name,
)
from poslab.tasks import build_task, task_from_checkpoint
from poslab.track.loggers import (
    build_logger,
    define_summaries,
    finish_logger,
    log_final,
    resolve_wandb_mode,
    wandb_info,
)
from poslab.track.summary import RunSummary

warnings.filterwarnings("ignore", ".*does not have many workers.*")  # in-memory data: workers only cost
warnings.filterwarnings("ignore", ".*LeafSpec.*deprecated.*")


class _WithoutHostedLoggerTip(logging.Filter):
    """Lightning advertises its hosted logger (LitLogger) at the start of every run; poslab logs to W&B."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "litlogger" not in record.getMessage().lower()


logging.getLogger("lightning.pytorch.utilities.rank_zero").addFilter(_WithoutHostedLoggerTip())


def train(cfg: DictConfig) -> dict[str, Any]:
    """Fit, test the best checkpoint, report. Returns the summary it writes. A signal (SIGINT, SIGTERM,
    SIGUSR1) in any phase ends it with :class:`RunInterrupted` (see :mod:`poslab.interrupts`)."""
    with interrupts.handled():
        return _train(cfg)


def _train(cfg: DictConfig) -> dict[str, Any]:

    start = time.perf_counter()
    check_accelerator(cfg)
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    # Bad data or encoder options fail here, before anything is written; so do sizes that do not fit.
    try:
        datamodule = build_datamodule(cfg)
        datamodule.prepare_data()
        datamodule.setup("fit")
        check_fits(lambda: build_task(cfg, datamodule), str(cfg.trainer.get("accelerator", "auto")))
        task = build_task(cfg, datamodule)
    except (MemoryError, RuntimeError) as exc:
        raise _too_big(exc) from None

    resuming = bool(cfg.resume)
    if resuming:  # resume.resumed_config has checked the directory and the config
        run_dir, name = Path(cfg.resume), Path(cfg.resume).name
    else:
        name = run_name(cfg, config_hash(to_dict(cfg), ignore=("run",)))
        run_dir = (Path(cfg.run.root) / cfg.modality / name).resolve()
        if resumable_launch_run(run_dir):  # a requeued SLURM job, a restarted torchrun: its own run, unfinished
            cfg, resuming = relaunched_config(cfg, run_dir), True
            if not is_child_rank():
                print(f"resuming {run_dir}: this {cluster.current().kind} job's run, left unfinished", flush=True)
        else:
            run_dir = create_run_dir(cfg, name)
    os.environ[RUN_NAME_ENV] = name  # DDP children re-run the command and must find the same directory
    try:
        with run_lock(run_dir):
            if resuming:
                wandb_id = read_record(run_dir).get("wandb_id")
            else:
                wandb_id = launch_wandb_id(run_dir) if cluster.current().kind != "local" else secrets.token_hex(4)
                if not is_child_rank():  # rank 0 records the run; the others join it
                    write_record(run_dir, cfg, wandb_id)
            with logged_run(cfg, run_dir, name, "train", wandb_id=wandb_id, keep=resuming) as logger:
                return _fit_and_test(cfg, datamodule, task, run_dir, name, logger, start)
    finally:
        if "LOCAL_RANK" not in os.environ:
            os.environ.pop(RUN_NAME_ENV, None)


def _fit_and_test(cfg, datamodule, task, run_dir: Path, name: str, logger: Any, start: float) -> dict[str, Any]:
    """Fit (from ``checkpoints/last.ckpt`` when resuming), test the best checkpoint, write the summary."""

    monitor, mode = task.monitor
    checkpoint = RunCheckpoint(
        dirpath=run_dir / "checkpoints",
        filename="best",
        monitor=monitor,
        mode=mode,
        auto_insert_metric_name=False,
    )
    periodic = PeriodicLast(run_dir / "checkpoints", cfg.run.checkpoint_every_n_steps)
    fitted = FitMetrics(run_dir / FIT_RECORD, checkpoint)
    callbacks = [FiniteLoss(), checkpoint, periodic, TrainingPosition(), StepTimer(), History(), EncoderFigure()]
    callbacks.append(fitted)
    if logger is not None:
        callbacks.append(LearningRateMonitor(logging_interval="step"))
    callbacks = build_callbacks(cfg.callbacks, RunFacts(monitor, mode, cfg.optim.lr), callbacks)
    trainer = build_trainer(cfg, run_dir, logger, callbacks)
    define_summaries(logger, monitor, mode)
    last = run_dir / LAST_CHECKPOINT
    if cfg.resume:
        verify_digest(last)
    try:
        trainer.fit(task, datamodule=datamodule, ckpt_path=str(last) if cfg.resume else None, weights_only=False)
        interrupted = trainer.received_sigterm  # Lightning may also end the fit quietly after the signal
    except (SIGTERMException, RunInterrupted):
        interrupted = True
    except (MisconfigurationException, ValueError) as exc:  # settings Lightning judges once it sees the data
        if isinstance(exc, ValueError) and not raised_by_lightning(exc):
            raise
        raise ConfigError(f"trainer settings rejected: {first_line(exc)}") from None
    except (MemoryError, RuntimeError) as exc:
        asked = memory_problem(exc)
        if asked is None:
            raise
        raise RunStopped(
            f"training ran out of memory at step {trainer.global_step} (one allocation asked for {asked}); the "
            "checkpoints so far are kept: lower data.batch_size or the model's sizes"
        ) from None
    if interrupted or interrupts.received():
        raise interrupted_run(run_dir, f"at step {trainer.global_step}")
    try:
        return _test_and_report(cfg, datamodule, task, run_dir, name, trainer, checkpoint, periodic, fitted, start)
    except (SIGTERMException, RunInterrupted):
        raise interrupted_run(run_dir, "after training, while testing and evaluating") from None
    except (MemoryError, RuntimeError) as exc:  # an evaluation's data or lengths too large for the machine
        asked = memory_problem(exc)
        if asked is None:
            raise
        raise RunStopped(
            f"testing or an end-of-run evaluation ran out of memory (one allocation asked for {asked}); the "
            f"checkpoints are kept: lower the eval.* sizes and continue with poslab train resume={run_dir}"
        ) from None


def raised_by_lightning(exc: BaseException) -> bool:
    """Whether Lightning's own code raised ``exc`` (its checks of the settings against the data, such as
    ``val_check_interval`` longer than an epoch), not the model or the data code it called."""

    frames = traceback.extract_tb(exc.__traceback__)
    return bool(frames) and f"{os.sep}lightning{os.sep}pytorch{os.sep}" in frames[-1].filename


def _too_big(exc: BaseException) -> BaseException:
    """An allocation that failed is one line naming the sizes to lower; any other error stays as it is."""
    asked = memory_problem(exc)
    if asked is None:
        return exc
    return ConfigError(
        f"the model and data do not fit in this machine's memory (one allocation asked for {asked}); "
        "lower model.dim, model.depth, model.num_heads, data.batch_size or the data sizes"
    )


def interrupted_run(run_dir: Path, where: str) -> RunInterrupted:
    """The one line an interrupted run ends with: the signal, where, and how to continue (exit 128 + signal)."""
    number = interrupts.received() or signal.SIGTERM
    name = signal.Signals(number).name
    if (run_dir / LAST_CHECKPOINT).is_file():
        if number == signal.SIGUSR1 and cluster.under_slurm() and not is_child_rank():  # `#SBATCH --signal=USR1@90`
            requeued = cluster.requeue(cluster.slurm_job())
            return RunInterrupted(f"interrupted by {name} {where}; checkpoint saved; {requeued}", number)
        return RunInterrupted(
            f"interrupted by {name} {where}; checkpoint saved, continue with: poslab train resume={run_dir}", number
        )
    return RunInterrupted(f"interrupted by {name} {where}, before any checkpoint; run the same command again", number)


def _test_and_report(cfg, datamodule, task, run_dir, name, trainer, checkpoint, periodic, fitted, start) -> RunSummary:
    monitor, _ = task.monitor
    recorded = fitted.recorded(trainer.global_step) or {}  # a run resumed after its fit logs no fit metric again
    fit_metrics = {**recorded.get("metrics", {}), **scalar_metrics(trainer.callback_metrics)}
    # Lightning logs step metrics every trainer.log_every_n_steps: the last step's values, as summary.json has them
    log_final(trainer, {k: v for k, v in fit_metrics.items() if k.startswith("train/")}, columns=False)
    best = checkpoint.best_model_path or None
    if recorded.get("best_checkpoint"):  # resumed after the fit: the last.ckpt it read predates the best
        best = str(run_dir / FIT_RECORD.parent / recorded["best_checkpoint"])
    if cfg.resume and best:  # written by an earlier process: verified as last.ckpt was
        verify_digest(Path(best))
    test_metrics = trainer.test(task, datamodule=datamodule, ckpt_path=best, verbose=False, weights_only=True)
    interrupts.check("testing")
    metrics = {**fit_metrics, **(test_metrics[0] if test_metrics else {})}
    logged = set(metrics)  # through Lightning's loops
    best_score = recorded.get("best_score", checkpoint.best_model_score)
    if best_score is not None:
        metrics[f"{monitor}_best"] = float(best_score)
    checkpoints = {
        "best": _relative(best, run_dir),
        "last": _relative(periodic.last_model_path or None, run_dir),
    }
    return finish_run("train", cfg, run_dir, name, trainer, task, metrics, logged, checkpoints, start)


def evaluate(ckpt: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """Re-test a checkpoint, optionally at another ``data.image_size`` / ``data.coords``.

    The model is rebuilt from the checkpoint's own config (loaded with
    ``weights_only=True``); only data, eval, trainer, logger and run keys (and the seed) may change.
    Results go to ``<train run>/eval/<name>/summary.json``; an interrupted evaluation leaves nothing there.
    """

    with interrupts.handled():
        try:
            return _evaluate(ckpt, overrides)
        except (SIGTERMException, RunInterrupted):
            number = interrupts.received() or signal.SIGTERM
            raise RunInterrupted(
                f"interrupted by {signal.Signals(number).name} while evaluating; nothing was written: run the same "
                "command again",
                number,
            ) from None


def _evaluate(ckpt: str | Path, overrides) -> RunSummary:

    start = time.perf_counter()
    path = Path(ckpt)
    if not path.is_file():
        raise PoslabError(f"checkpoint {path} does not exist")
    verify_digest(path)
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
        stored = checkpoint["hyper_parameters"]["cfg"]
    except Exception as exc:  # not a poslab checkpoint, or a corrupt file
        raise PoslabError(f"cannot read checkpoint {path}: {first_line(exc)}") from None
    cfg = recompose(stored, [*overrides, f"eval.ckpt={path}"])
    check_accelerator(cfg)
    datamodule = build_datamodule(cfg, train_cfg=stored)
    datamodule.prepare_data()
    datamodule.setup("test")
    try:
        task = task_from_checkpoint(checkpoint)
    except (KeyError, RuntimeError, TypeError, ValueError) as exc:  # weights of another shape, a stripped file
        raise PoslabError(f"cannot rebuild the model from checkpoint {path}: {first_line(exc)}") from None

    train_dir = path.resolve().parent.parent
    named = any(o.startswith("run.name=") for o in overrides)  # the stored run.name is the training run's
    name = cfg.run.name if named else f"eval-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
    run_dir = train_dir / "eval" / name
    if (run_dir / "summary.json").exists():
        raise PoslabError(f"{run_dir} already holds an evaluation; choose another run.name")
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        return _test_checkpoint(cfg, run_dir, train_dir, name, datamodule, task, path, start)
    except BaseException:  # nothing half-written survives (bad input, an interrupt, a bug)
        remove_run_dir(run_dir)
        raise


def _test_checkpoint(cfg, run_dir, train_dir, name, datamodule, task, path, start) -> RunSummary:
    with logged_run(cfg, run_dir, f"{train_dir.name}-eval-{name}", "eval") as logger:
        trainer = build_trainer(cfg, run_dir, logger, [EncoderFigure()])
        define_summaries(logger, *task.monitor)
        metrics = trainer.test(task, datamodule=datamodule, verbose=False)[0]
        interrupts.check("testing")
        source = {"source": str(path)}
        return finish_run("eval", cfg, run_dir, name, trainer, task, metrics, set(metrics), source, start)


@contextmanager
def logged_run(
    cfg: DictConfig, run_dir: Path, name: str, job_type: str, wandb_id: str | None = None, keep: bool = False
) -> Iterator[Any]:
    """The run's logger, always finished; on bad input the run directory is removed (unless ``keep``:
    a resumed run's directory holds earlier work, and an interrupted one its checkpoint)."""

    logger = None
    try:
        logger = build_logger(cfg, run_dir, name, job_type=job_type, wandb_id=wandb_id)
        yield logger
    except (RunInterrupted, RunStopped):  # the run's checkpoints so far stay
        raise
    except PoslabError:
        if not keep:
            remove_run_dir(run_dir)
        raise
    finally:
        finish_logger(logger)


def finish_run(kind, cfg, run_dir, name, trainer, task, metrics, logged, checkpoints, start) -> RunSummary:
    """The run's end-of-run evaluations (Lightning test passes), then ``summary.json``, written (rank 0
    only) last and atomically. Every number it holds is logged under the same key: ``logged`` are those
    Lightning's loops logged; the rest (the best checkpoint's score, what callbacks measured, the
    parameter count, the wall time) is logged here."""

    evaluations = task.evaluations(cfg)
    evaluated = run_evaluations(trainer, task, evaluations, metrics)
    summary = build_summary(
        kind, cfg, run_dir, name, trainer, task, [*trainer.callbacks, *evaluations], {**metrics, **evaluated},
        checkpoints, start,
    )  # fmt: skip
    logged = {*logged, *evaluated}
    log_final(trainer, {k: v for k, v in summary.logged_scalars().items() if k not in logged})
    if trainer.is_global_zero:
        summary.write(run_dir)
    return summary


def check_accelerator(cfg: DictConfig) -> None:
    """Device settings checked before anything is written: ``trainer=gpu`` / ``ddp`` where no GPU is is one
    line naming what is present; settings Lightning rejects (``trainer.precision=99``) are one line too."""
    accelerator = str(cfg.trainer.get("accelerator", "auto"))
    if accelerator in ("gpu", "cuda", "mps"):
        _check_gpu_present(cfg, accelerator)
    cluster.check_world(int(cfg.trainer.get("num_nodes", 1)), cfg.trainer.get("devices", "auto"))
    _check_device_settings(cfg)


def _check_device_settings(cfg: DictConfig) -> None:
    """Let Lightning's own connector judge accelerator / devices / strategy / precision / nodes."""

    if _AcceleratorConnector is None:  # moved in another Lightning version: the Trainer will judge them itself
        return

    judged = ("devices", "accelerator", "strategy", "num_nodes", "precision")
    settings = {k: v for k, v in trainer_arguments(cfg).items() if k in judged}
    quiet = logging.getLogger("lightning.pytorch")
    level, quiet.level = quiet.level, logging.WARNING
    try:
        _AcceleratorConnector(**settings)
    except Exception as exc:  # MisconfigurationException, ValueError, TypeError: all mean bad settings
        message = first_line(exc)
        raise ConfigError(f"trainer settings rejected (trainer={cfg.trainer.get('name')}): {message}") from None
    finally:
        quiet.level = level


def _check_gpu_present(cfg: DictConfig, accelerator: str) -> None:
    present = {"cuda": torch.cuda.is_available(), "mps": torch.backends.mps.is_available()}
    if present["cuda"] or (accelerator != "cuda" and present["mps"]):
        return
    there = ", ".join(["cpu", *(k for k, v in present.items() if v)])
    raise ConfigError(
        f"trainer.accelerator={accelerator} (trainer={cfg.trainer.name}) but this machine has no "
        f"{'GPU' if accelerator == 'gpu' else accelerator.upper()}, only: {there}; use trainer=cpu, or "
        "trainer=ddp trainer.accelerator=cpu trainer.devices=N for several processes on the CPU"
    )


def trainer_arguments(cfg: DictConfig) -> dict[str, Any]:
    """The ``lightning.Trainer`` arguments a config sets, on poslab's defaults (the rest stay Lightning's)."""

    return {**TRAINER_DEFAULTS, **{k: v for k, v in to_dict(cfg.trainer).items() if k != "name"}}


def build_trainer(cfg: DictConfig, run_dir: Path, logger: Any, callbacks: list):

    kwargs = trainer_arguments(cfg)
    if kwargs.get("enable_progress_bar") is not False and sys.stdout.isatty():
        callbacks = [*callbacks, RichProgressBar()]

    try:
        return L.Trainer(
            **kwargs,
            logger=logger if logger is not None else False,
            callbacks=callbacks,
            plugins=[DigestedCheckpointIO(), *slurm_plugin()],  # each checkpoint with its SHA-256 beside it
            default_root_dir=str(run_dir),
        )
    except (MisconfigurationException, ValueError, TypeError) as exc:  # a value Lightning refuses
        raise ConfigError(f"trainer settings rejected (trainer={cfg.trainer.name}): {first_line(exc)}") from None


def slurm_plugin() -> list:
    """Under SLURM, Lightning's SLURM environment without its own requeue handler: SIGUSR1 takes poslab's one
    interrupt path (checkpoint at a batch boundary, then ``scontrol requeue``: :func:`interrupted_run`)."""
    if not cluster.under_slurm():
        return []

    return [SLURMEnvironment(auto_requeue=False)]


def scalar_metrics(metrics: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items() if getattr(v, "numel", lambda: 1)() == 1}


def build_summary(kind, cfg, run_dir, name, trainer, task, reporters, metrics, checkpoints, start) -> RunSummary:
    """The run's :class:`~poslab.track.summary.RunSummary`: ``metrics`` plus what every reporter added."""

    merged: dict[str, dict[str, Any]] = {"metrics": dict(metrics), "tables": {}, "figures": {}, "history": {},
                                         "curves": {}}  # fmt: skip
    for reporter in reporters:
        for section, values in getattr(reporter, "report", {}).items():
            merged[section].update(values)
    return RunSummary(
        kind=kind,
        run_name=name,
        run_dir=str(run_dir),
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
        checkpoint_sha256={
            k: recorded_digest(Path(run_dir) / v) for k, v in checkpoints.items() if k != "source" and v
        },
        num_params=sum(p.numel() for p in task.parameters()),
        wall_time_s=round(time.perf_counter() - start, 2),
        wandb=wandb_info(trainer.logger, resolve_wandb_mode(cfg.logger.mode)),
        versions={"poslab": __version__, "torch": torch.__version__, "lightning": L.__version__},
        created=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    )


def _relative(path: str | None, run_dir: Path) -> str | None:
    return str(Path(path).relative_to(run_dir)) if path else None
