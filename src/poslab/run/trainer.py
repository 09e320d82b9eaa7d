"""The ``lightning.Trainer`` a run drives, built from ``trainer.*``, and its settings checked before the data
loads or anything is written."""

from __future__ import annotations

import logging
import os
import sys
import traceback
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch import profilers
from lightning.pytorch.callbacks import RichProgressBar
from omegaconf import DictConfig

from poslab.config.composition import to_dict
from poslab.errors import ConfigError, first_line
from poslab.run import cluster
from poslab.run.checkpoints import DigestedCheckpointIO
from poslab.run.progress import PlainProgress
from poslab.run.trainer_options import TRAINER_DEFAULTS


def check_accelerator(cfg: DictConfig) -> None:
    """Device settings checked before anything is written: ``trainer=gpu`` / ``ddp`` where no GPU is is one
    line naming what is present; settings Lightning rejects (``trainer.precision=99``) are one line too."""
    accelerator = str(cfg.trainer.get("accelerator", "auto"))
    if accelerator in ("gpu", "cuda", "mps"):
        _check_gpu_present(cfg, accelerator)
    cluster.check_world(int(cfg.trainer.get("num_nodes", 1)), cfg.trainer.get("devices", "auto"))
    _check_device_settings(cfg)


def _check_device_settings(cfg: DictConfig) -> None:
    """Let Lightning judge every trainer setting by building a Trainer of them (quietly, with no logger,
    callbacks or files): what it would refuse at construction (``trainer.profiler=bogus``,
    ``trainer.limit_train_batches=1.5``, a precision the accelerator lacks) stops the run before its data
    loads. Settings Lightning judges only against the data are checked when the fit starts."""
    quiet = logging.getLogger("lightning.pytorch")
    level = quiet.level
    quiet.setLevel(logging.WARNING)  # setLevel, not .level =: it clears the loggers' cached levels after
    try:
        quietly = {"enable_progress_bar": False, "enable_model_summary": False}
        L.Trainer(**{**trainer_arguments(cfg), **quietly}, logger=False, enable_checkpointing=False, callbacks=[])
    except Exception as exc:  # MisconfigurationException, ValueError, TypeError: all mean bad settings
        message = first_line(exc)
        raise ConfigError(f"trainer settings rejected (trainer={cfg.trainer.get('name')}): {message}") from None
    finally:
        quiet.setLevel(level)


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


def build_trainer(cfg: DictConfig, run_dir: Path, loggers: Any, callbacks: list) -> L.Trainer:
    """The run's Trainer: its logger and callbacks, each checkpoint written with its SHA-256 beside it, a rich
    progress bar on a terminal; a value Lightning refuses is one line."""
    kwargs = trainer_arguments(cfg)
    if kwargs.get("enable_progress_bar") is not False:  # a live bar on a terminal, plain lines in a log file
        callbacks = [*callbacks, RichProgressBar() if sys.stdout.isatty() else PlainProgress()]
    kwargs["profiler"] = profiler(kwargs.get("profiler"), run_dir)
    try:
        return L.Trainer(
            **kwargs,
            logger=loggers if loggers else False,  # a logger, or a list of them
            callbacks=callbacks,
            plugins=[DigestedCheckpointIO(), *slurm_plugin()],
            default_root_dir=str(run_dir),
        )
    except (MisconfigurationException, ValueError, TypeError) as exc:
        raise ConfigError(f"trainer settings rejected (trainer={cfg.trainer.name}): {first_line(exc)}") from None


def profiler(name: str | None, run_dir: Path) -> Any:
    """``trainer.profiler=simple|advanced|pytorch``: Lightning's profiler of that name, writing its report to
    ``<run>/fit-profiler.txt`` (and ``test-…``) instead of hundreds of lines on the console; any other value
    goes to Lightning as given."""
    kinds = {"simple": profilers.SimpleProfiler, "advanced": profilers.AdvancedProfiler,
             "pytorch": profilers.PyTorchProfiler}  # fmt: skip
    return kinds[name](dirpath=run_dir, filename="profiler") if name in kinds else name


def slurm_plugin() -> list:
    """Under SLURM, Lightning's SLURM environment without its own requeue handler: SIGUSR1 takes poslab's one
    interrupt path (checkpoint at a batch boundary, then ``scontrol requeue``: :meth:`Run.interrupted`)."""
    return [SLURMEnvironment(auto_requeue=False)] if cluster.under_slurm() else []


def raised_by_lightning(exc: BaseException) -> bool:
    """Whether Lightning's own code raised ``exc`` (its checks of the settings against the data, such as
    ``val_check_interval`` longer than an epoch), not the model or the data code it called."""
    frames = traceback.extract_tb(exc.__traceback__)
    return bool(frames) and f"{os.sep}lightning{os.sep}pytorch{os.sep}" in frames[-1].filename
