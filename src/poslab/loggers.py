"""Experiment loggers: W&B by default, CSV / TensorBoard presets, or none.

W&B facts this module is built around (wandb 0.31, Lightning 2.6):

* the mode is passed to the logger explicitly, so it wins over ``WANDB_MODE``;
* ``auto`` = online when credentials exist, otherwise offline;
* every run ends with ``wandb.finish()`` then ``wandb.teardown()``: without
  finish the next logger in the process reuses the run (Lightning #5212), and
  offline files are complete only after teardown.
"""

from __future__ import annotations

import netrc
import os
import shlex
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from matplotlib.figure import Figure

from poslab.errors import first_line
from poslab.plots import save_figure

WANDB_MODES = ("online", "offline", "disabled")
#: Seconds ``wandb.init`` may wait for the server before the run falls back to offline.
INIT_TIMEOUT_S = 20
#: Why online W&B failed in this process: later runs (a comparison's) go offline at once.
_online_failure: str | None = None


def wandb_credentials_present() -> bool:
    """An API key in the environment or a netrc entry for the W&B host."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname
    path = os.environ.get("NETRC", str(Path.home() / ".netrc"))
    try:
        return netrc.netrc(path).authenticators(host) is not None
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return False


def resolve_wandb_mode(mode: str) -> str:
    """``auto`` -> ``WANDB_MODE`` when set, else online with credentials, offline without."""
    if mode != "auto":
        return mode
    env = os.environ.get("WANDB_MODE", "").lower()
    if env in WANDB_MODES:
        return env
    if env == "dryrun":
        return "offline"
    return "online" if wandb_credentials_present() else "offline"


def wandb_group(cfg: Any) -> str:
    """One group per (modality, task, experiment, encoder, variant), so seeds aggregate in the dashboard
    and two experiments of one encoder (``needle`` and ``copy`` are both text sequence tasks) do not mix."""
    if cfg.logger.group:
        return cfg.logger.group
    experiment = f"-{cfg.experiment}" if cfg.experiment else ""
    variant = f"-{cfg.variant}" if cfg.get("variant") else ""
    return f"{cfg.modality}-{cfg.task.name}{experiment}-{cfg.encoder.name}{variant}"


def flat_columns(cfg: Any) -> dict[str, Any]:
    """The columns a W&B table of runs is sorted and grouped by."""
    return {
        "encoder": cfg.encoder.name,
        "modality": cfg.modality,
        "task": cfg.task.name,
        "seed": cfg.seed,
        "experiment": cfg.experiment,
        "variant": cfg.get("variant"),
        "dataset": cfg.data.name,
    }


def build_logger(cfg: Any, run_dir: Path, run_name: str, job_type: str = "train", wandb_id: str | None = None):
    """The Lightning logger for ``cfg.logger`` (None for ``logger=none``).

    ``wandb_id``: the W&B run id, fixed when the run starts so that a resumed
    run continues the same W&B run (``resume="allow"``).
    """
    kind = cfg.logger.name
    if kind == "none":
        return None
    if kind == "csv":
        from lightning.pytorch.loggers import CSVLogger

        return CSVLogger(save_dir=run_dir, name="csv", version="")
    if kind == "tensorboard":
        from lightning.pytorch.loggers import TensorBoardLogger

        return TensorBoardLogger(save_dir=run_dir, name="tensorboard", version="", default_hp_metric=False)
    global _online_failure

    env = os.environ.get("WANDB_MODE")
    if env is not None and env.lower() not in (*WANDB_MODES, "dryrun", "run", ""):
        from poslab.errors import ConfigError

        raise ConfigError(f"WANDB_MODE={env} is not a W&B mode; valid: {', '.join(WANDB_MODES)}")
    mode = resolve_wandb_mode(cfg.logger.mode)
    if mode == "online" and _online_failure:
        mode = "offline"
    try:
        return _start_wandb(cfg, run_dir, run_name, job_type, wandb_id, mode)
    except Exception as exc:
        if mode != "online":
            from poslab.errors import PoslabError

            raise PoslabError(f"W&B could not start ({mode}): {first_line(exc)}") from None
        _online_failure = first_line(exc)
        import sys

        print(
            f"poslab: W&B could not start online ({_online_failure}); this run logs offline — "
            f"upload it later with `wandb sync {Path(run_dir) / 'wandb'}/offline-run-*`",
            file=sys.stderr,
        )
        return _start_wandb(cfg, run_dir, run_name, job_type, wandb_id, "offline")


def _start_wandb(cfg: Any, run_dir: Path, run_name: str, job_type: str, wandb_id: str | None, mode: str):
    """A started ``WandbLogger`` (``wandb.init`` bounded by :data:`INIT_TIMEOUT_S`)."""
    import wandb
    from lightning.pytorch.loggers import WandbLogger

    tags = [cfg.modality, cfg.task.name, cfg.encoder.name, *cfg.logger.tags]
    if cfg.experiment:
        tags.append(f"experiment:{cfg.experiment}")
    logger = WandbLogger(
        name=run_name,
        save_dir=str(run_dir),
        project=cfg.logger.project,
        entity=cfg.logger.entity,
        group=wandb_group(cfg),
        job_type=job_type,
        tags=sorted(set(tags)),
        notes=cfg.logger.notes,
        log_model=cfg.logger.log_model and mode == "online",
        mode=mode,
        config=flat_columns(cfg),
        settings=wandb.Settings(init_timeout=INIT_TIMEOUT_S),
        **({"id": wandb_id, "resume": "allow"} if wandb_id else {}),
    )
    logger.poslab_mode = mode  # what it runs as (an online run that fell back is offline)
    try:
        logger.experiment  # start the run now (Lightning also sets trainer/global_step as x-axis)  # noqa: B018
    except BaseException:
        wandb.teardown()  # leave no half-started run for the next logger of this process
        raise
    return logger


def is_wandb(logger: Any) -> bool:
    return type(logger).__name__ == "WandbLogger"


def wandb_info(logger: Any, mode: str) -> dict[str, Any]:
    """``summary.json``'s ``wandb`` entry: mode, local run folder, URL, sync command.

    ``mode`` is the resolved ``logger.mode``; without a W&B logger (or on a DDP rank other
    than 0, whose logger holds a stand-in run) every field is None.
    """
    from lightning.pytorch.loggers.logger import DummyExperiment

    run = logger.experiment if is_wandb(logger) else None
    if run is None or isinstance(run, DummyExperiment):
        return {"mode": None, "dir": None, "url": None, "path": None, "sync_command": None}
    mode = getattr(logger, "poslab_mode", mode)
    run_dir = str(Path(run.dir).parent) if mode != "disabled" and getattr(run, "dir", None) else None
    url = getattr(run, "url", None) if mode == "online" else None
    path = getattr(run, "path", None) if mode == "online" else None
    sync = f"wandb sync {shlex.quote(run_dir)}" if mode == "offline" and run_dir else None
    return {
        "mode": mode,
        "dir": run_dir,
        "url": url,
        "path": "/".join(path) if isinstance(path, list) else path,
        "sync_command": sync,
    }


def log_figure(logger: Any, key: str, fig: Figure, path: Path) -> Path:
    """Save ``fig`` as PNG and hand it to the logger (W&B image, TensorBoard figure)."""
    save_figure(fig, path)
    if is_wandb(logger):
        logger.log_image(key=key, images=[str(path)])
    elif type(logger).__name__ == "TensorBoardLogger":
        logger.experiment.add_figure(key, fig)
    return path


def log_table(logger: Any, key: str, columns: list[str], rows: list[list[Any]]) -> None:
    if is_wandb(logger):
        logger.log_table(key=key, columns=columns, data=rows)


def log_line_chart(logger: Any, key: str, xs: list, series: dict[str, list], title: str) -> None:
    """A W&B line chart with one line per series (points that are None are dropped).

    ``wandb.plot.line_series`` stores its data under ``<key>_table``, so no
    table of ours may end in ``_table``.
    """
    if not is_wandb(logger):
        return
    import wandb

    names = [n for n, ys in series.items() if any(y is not None for y in ys)]
    if not names:
        return
    points = [[(x, y) for x, y in zip(xs, series[n], strict=True) if y is not None] for n in names]
    chart = wandb.plot.line_series(
        xs=[[x for x, _ in p] for p in points],
        ys=[[y for _, y in p] for p in points],
        keys=names,
        title=title,
        xname="context length",
    )
    logger.experiment.log({key: chart})


def finish_logger(logger: Any) -> None:
    """Close the run so the next one in this process is separate, and flush its files."""
    if logger is None:
        return
    if is_wandb(logger):
        import wandb

        if logger._experiment is not None:
            logger.experiment.finish()
        wandb.teardown()
    else:
        logger.finalize("success")
