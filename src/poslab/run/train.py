"""``train(cfg) -> summary`` and ``evaluate(ckpt, overrides) -> summary``: a whole run from a composed config.

Each builds the data and the model first (bad input fails before anything is written), then a
:class:`~poslab.run.run.Run` holds its directory and logger while it goes through its phases, and returns the
summary it wrote. The CLI only parses, composes and prints the result; tests call these directly.
"""

from __future__ import annotations

import logging
import signal
import sys
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.utilities.exceptions import SIGTERMException
from omegaconf import DictConfig

from poslab import interrupts
from poslab.config.composition import recompose, to_dict
from poslab.data import build_datamodule
from poslab.errors import ConfigError, PoslabError, RunInterrupted, first_line, memory_problem
from poslab.modalities.registry import get_modality
from poslab.run.checkpoints import verify_digest
from poslab.run.memory import check_fits
from poslab.run.run import Run
from poslab.run.trainer import check_accelerator
from poslab.tasks import task_from_checkpoint
from poslab.track.summary import RunSummary

warnings.filterwarnings("ignore", ".*does not have many workers.*")  # in-memory data: workers only cost
warnings.filterwarnings("ignore", ".*LeafSpec.*deprecated.*")
warnings.filterwarnings("ignore", ".*IterableDataset. has .__len__. defined.*")  # litdata's windows, per rank
# an epoch shorter than trainer.log_every_n_steps: poslab logs the last step's training metrics at the end of
# the fit (Run.test_best), so the curve is never empty, and the warning repeats on every short run
warnings.filterwarnings("ignore", ".*smaller than the logging interval.*")


class _WithoutHostedLoggerTip(logging.Filter):
    """Lightning advertises its hosted logger (LitLogger) at the start of every run; poslab logs to W&B."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "litlogger" not in record.getMessage().lower()


logging.getLogger("lightning.pytorch.utilities.rank_zero").addFilter(_WithoutHostedLoggerTip())


def train(cfg: DictConfig) -> RunSummary:
    """Fit, test the best checkpoint, run the end-of-run evaluations, write ``summary.json``; returns it. A
    signal (SIGINT, SIGTERM, SIGUSR1) in any phase ends it with :class:`RunInterrupted`
    (:mod:`poslab.interrupts`)."""
    with interrupts.handled():
        started = time.perf_counter()
        # Runs trained one after another in one process (`poslab compare`) add up dynamo's graphs of the one
        # FlexAttention function; past its recompile limit (8) it runs unfused, every L x L score laid out
        # (seen on an H200 by `make gpu-check`). Each run starts with none.
        torch._dynamo.reset()
        check_accelerator(cfg)
        L.seed_everything(cfg.seed, workers=True, verbose=False)
        datamodule, task = build_parts(cfg)
        run = Run.for_training(cfg, started)
        with run.held():
            best = run.fit(task, datamodule)
            return run.test_best(task, datamodule, best)


def build_parts(cfg: DictConfig) -> tuple[L.LightningDataModule, L.LightningModule]:
    """The data module (set up for fitting) and the task; bad data or options fail here, and so does a model
    that cannot fit in the machine's memory, counted before it is allocated."""
    modality, plain = get_modality(cfg.modality), to_dict(cfg)
    try:
        datamodule = modality.datamodule_for(cfg)
        datamodule.prepare_data()
        datamodule.setup("fit")
        check_fits(lambda: modality.task_for(plain, datamodule), str(cfg.trainer.get("accelerator", "auto")))
        return datamodule, modality.task_for(plain, datamodule)
    except (MemoryError, RuntimeError) as exc:
        asked = memory_problem(exc)
        if asked is None:
            raise
        raise ConfigError(
            f"the model and data do not fit in this machine's memory (one allocation asked for {asked}); "
            "lower model.dim, model.depth, model.num_heads, data.batch_size or the data sizes"
        ) from None


def evaluate(ckpt: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> RunSummary:
    """Re-test a checkpoint, optionally at another ``data.image_size`` / ``data.coords``.

    The model is rebuilt from the checkpoint's own config (loaded with ``weights_only=True``); only data, eval,
    trainer, logger and run keys (and the seed) may change. Results go to
    ``<training run>/eval/<name>/summary.json``; an evaluation that fails or is interrupted leaves nothing there.
    """
    with interrupts.handled(), _said_while_evaluating():
        started = time.perf_counter()
        source = Path(ckpt)
        checkpoint, note = read_checkpoint(source)
        stored = checkpoint["hyper_parameters"]["cfg"]
        cfg = recompose(stored, [*overrides, f"eval.ckpt={source}"])
        check_accelerator(cfg)
        datamodule = build_datamodule(cfg, train_cfg=stored)
        datamodule.prepare_data()
        datamodule.setup("test")
        try:
            task = task_from_checkpoint(checkpoint)
        except (KeyError, RuntimeError, TypeError, ValueError) as exc:  # weights of another shape, a stripped file
            raise PoslabError(f"cannot rebuild the model from checkpoint {source}: {first_line(exc)}") from None
        if note:
            print(note, file=sys.stderr)
        named = any(o.startswith("run.name=") for o in overrides)  # the stored run.name is the training run's
        run = Run.for_evaluation(cfg, source, named, started)
        with run.held():
            return run.test(task, datamodule)


@contextmanager
def _said_while_evaluating() -> Iterator[None]:
    """A signal while evaluating ends it with one line: nothing was written, run the command again."""
    try:
        yield
    except (SIGTERMException, RunInterrupted):
        number = interrupts.received() or signal.SIGTERM
        raise RunInterrupted(
            f"interrupted by {signal.Signals(number).name} while evaluating; nothing was written: run the same "
            "command again",
            number,
        ) from None


def read_checkpoint(path: Path) -> tuple[dict[str, Any], str | None]:
    """A poslab checkpoint, verified against its digest and loaded with ``weights_only=True``, and the warning to
    print once it is used when it had no digest to verify it by (:func:`~poslab.run.checkpoints.verify_digest`)."""
    if not path.is_file():
        raise PoslabError(f"checkpoint {path} does not exist")
    note = verify_digest(path)
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
        checkpoint["hyper_parameters"]["cfg"]
    except Exception as exc:  # not a poslab checkpoint, or a corrupt file
        raise PoslabError(f"cannot read checkpoint {path}: {first_line(exc)}") from None
    return checkpoint, note
