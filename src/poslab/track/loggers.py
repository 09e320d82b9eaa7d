"""Experiment loggers: W&B by default, CSV / TensorBoard presets, or none.

W&B facts this module is built around (wandb 0.31, Lightning 2.6):

* the mode is passed to the logger explicitly, so it wins over ``WANDB_MODE``;
* ``auto`` = online when credentials exist, otherwise offline;
* every run ends with ``wandb.finish()`` then ``wandb.teardown()``: without
  finish the next logger in the process reuses the run (Lightning #5212), and
  offline files are complete only after teardown.
"""

from __future__ import annotations

import inspect
import netrc
import os
import shlex
import sys
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import platformdirs
from matplotlib.figure import Figure

from poslab.entry_points import import_class
from poslab.errors import ConfigError, PoslabError, first_line
from poslab.track.plots import save_figure

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


def sweep_run_id() -> str | None:
    """The W&B run id a ``wandb agent`` hands the trial it starts (``WANDB_RUN_ID`` beside ``WANDB_SWEEP_ID``):
    the trial's run is the sweep's, so poslab records and logs to that id; None outside an agent."""
    return os.environ.get("WANDB_RUN_ID") if os.environ.get("WANDB_SWEEP_ID") else None


def wandb_group(cfg: Any, setting: str = "", job_type: str = "train") -> str:
    """One group per (modality, task, experiment, encoder, variant, setting), so seeds aggregate in the
    dashboard while two experiments of one encoder (``needle`` and ``copy`` are both text sequence tasks), two
    comparisons with different settings, and an evaluation of a run (``-eval``) each stay apart in W&B's
    grouping. ``setting``: :func:`poslab.run.policy.setting_hash`."""
    if cfg.logger.group:
        return cfg.logger.group
    experiment = f"-{cfg.experiment}" if cfg.experiment else ""
    variant = f"-{cfg.variant}" if cfg.get("variant") else ""
    suffix = "".join(f"-{part}" for part in (setting, "" if job_type == "train" else job_type) if part)
    return f"{cfg.modality}-{cfg.task.name}{experiment}-{cfg.encoder.name}{variant}{suffix}"


def flat_columns(cfg: Any, setting: str = "") -> dict[str, Any]:
    """The columns a W&B table of runs is sorted, grouped and filtered by (``setting``: what the run computes,
    seed aside, as a hash; the dashboard selects a comparison's runs by it)."""
    return {
        "setting": setting,
        "encoder": cfg.encoder.name,
        "modality": cfg.modality,
        "task": cfg.task.name,
        "seed": cfg.seed,
        "experiment": cfg.experiment,
        "variant": cfg.get("variant"),
        "dataset": cfg.data.name,
    }


def build_logger(
    cfg: Any, run_dir: Path, run_name: str, job_type: str = "train", wandb_id: str | None = None, setting: str = ""
):
    """The Lightning logger for ``cfg.logger`` (None for ``logger=none``).

    ``wandb_id``: the W&B run id, fixed when the run starts so that a resumed
    run continues the same W&B run (``resume="allow"``); ``setting``: the run's setting hash (W&B group, column).
    """
    kind = cfg.logger.name
    if kind == "none":
        return None
    if kind in ("csv", "tensorboard"):
        return file_logger(cfg, kind, run_dir)
    env = os.environ.get("WANDB_MODE")
    if env is not None and env.lower() not in (*WANDB_MODES, "dryrun", "run", ""):
        raise ConfigError(f"WANDB_MODE={env} is not a W&B mode; valid: {', '.join(WANDB_MODES)}")
    mode = effective_wandb_mode(resolve_wandb_mode(cfg.logger.mode))
    logger, _ = start_run_with_fallback(
        lambda m: _start_wandb(cfg, run_dir, run_name, job_type, wandb_id, setting, m), mode, Path(run_dir) / "wandb"
    )
    return logger


def log_destinations(loggers: list, cfg: Any) -> str:
    """Where a run's logs go, in words, logger by logger (:func:`log_destination`)."""
    return "; ".join(log_destination(logger, cfg) for logger in loggers or [None])


def log_destination(logger: Any, cfg: Any) -> str:
    """Where a run's logs go, in words: the W&B mode and its folder or page, the CSV file, the TensorBoard
    folder (with the command that shows it), or none."""
    if logger is None:
        return "no logger (a fast_dev_run logs nothing)" if cfg.trainer.get("fast_dev_run") else "no logger"
    if not is_wandb(logger):
        kind, folder = type(logger).__name__, Path(getattr(logger, "log_dir", None) or getattr(logger, "save_dir", "."))
        if kind == "CSVLogger":
            return f"CSV log: {Path(folder) / 'metrics.csv'}"
        if kind == "TensorBoardLogger":
            return f"TensorBoard log: {folder} (tensorboard --logdir {folder})"
        return f"{kind}: {folder}"
    mode = getattr(logger, "poslab_mode", "online")
    run = logger.experiment
    if mode == "online":
        return f"W&B online: {getattr(run, 'url', None) or 'started'}"
    return f"W&B {mode}" + (f": {Path(run.dir).parent}" if mode == "offline" and getattr(run, "dir", None) else "")


def build_loggers(cfg: Any, run_dir: Path, run_name: str, job_type: str = "train", wandb_id: str | None = None,
                  setting: str = "") -> list:  # fmt: skip
    """The preset's logger (:func:`build_logger`) and the file loggers ``logger.also`` names beside it."""
    first = build_logger(cfg, run_dir, run_name, job_type, wandb_id, setting)
    return [*([first] if first is not None else []), *(file_logger(cfg, kind, run_dir) for kind in cfg.logger.also)]


def file_logger(cfg: Any, kind: Any, run_dir: Path):
    """A CSV or TensorBoard logger under ``<run>/csv`` or ``<run>/tensorboard``, with its ``logger.<kind>.*``;
    or a logger class's (``{class_path, init_args}``), given the run directory where it takes a ``save_dir``."""
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger  # deferred: Lightning, ~7 s

    if not isinstance(kind, str):
        cls = import_class(kind["class_path"], object, "logger.also")
        takes_dir = "save_dir" in inspect.signature(cls).parameters
        return cls(**dict(kind.get("init_args") or {}), **({"save_dir": str(run_dir)} if takes_dir else {}))

    options = dict(cfg.logger.get(kind) or {})
    if kind == "csv":
        return CSVLogger(save_dir=run_dir, name="csv", version="", **options)
    return TensorBoardLogger(save_dir=run_dir, name="tensorboard", version="", default_hp_metric=False, **options)


def effective_wandb_mode(mode: str) -> str:
    """``online`` after online W&B failed once in this process is ``offline`` (a comparison's later runs and
    its report run do not wait for the server again)."""
    return "offline" if mode == "online" and _online_failure else mode


def wandb_settings():
    """A run's W&B settings: ``wandb.init`` bounded by :data:`INIT_TIMEOUT_S`, a quiet console."""
    import wandb  # deferred: W&B, ~0.8 s

    return wandb.Settings(init_timeout=INIT_TIMEOUT_S, **QUIET_SETTINGS)


def start_run_with_fallback(start, mode: str, folder: Path):
    """``(start(mode), mode)``; an online start that fails (no network, no server) falls back to offline with
    one line saying how to upload later, and the process stays offline from then on."""
    global _online_failure
    try:
        return start(mode), mode
    except Exception as exc:
        if mode != "online":
            raise PoslabError(f"W&B could not start ({mode}): {first_line(exc)}") from None
        _online_failure = first_line(exc)

        print(
            f"poslab: W&B could not start online ({_online_failure}); this run logs offline — "
            f"upload it later with `wandb sync {folder}/offline-run-*`",
            file=sys.stderr,
        )
        return start("offline"), "offline"


#: W&B's settings for a quiet console: no banner, offline hints or history footer (``quiet``; the info lines
#: of ``wandb.setup``), while its warnings and errors still print.
QUIET_SETTINGS = {"quiet": True, "show_info": False}


def _start_wandb(cfg: Any, run_dir: Path, run_name: str, job_type: str, wandb_id: str | None, setting: str,
                 mode: str):  # fmt: skip
    """A started ``WandbLogger`` (``wandb.init`` bounded by :data:`INIT_TIMEOUT_S`)."""
    import wandb  # deferred: W&B, ~0.8 s
    from lightning.pytorch.loggers import WandbLogger  # deferred: Lightning, ~7 s

    moves = place_wandb_folders(run_dir)
    if moves:
        named = " and ".join([", ".join(moves[:-1]), moves[-1]] if len(moves) > 1 else moves)
        print(f"poslab: W&B cannot write its {named} folders under the home directory; this run keeps them in "
              f"{run_dir / 'wandb-home'}", file=sys.stderr)  # fmt: skip
    check_staging_dir()  # a folder the user chose that cannot be written: W&B's own line, before training
    tags = [cfg.modality, cfg.task.name, cfg.encoder.name, *cfg.logger.tags]
    if cfg.experiment:
        tags.append(f"experiment:{cfg.experiment}")
    wandb.setup(
        wandb.Settings(**QUIET_SETTINGS)
    )  # W&B's own console: its warnings and errors only (the run prints its sync line itself)
    logger = WandbLogger(
        name=run_name,
        save_dir=str(run_dir),
        project=cfg.logger.project,
        entity=cfg.logger.entity,
        group=wandb_group(cfg, setting, job_type),
        job_type=job_type,
        tags=sorted(set(tags)),
        notes=cfg.logger.notes,
        log_model=cfg.logger.log_model,
        mode=mode,
        config=flat_columns(cfg, setting),
        settings=wandb_settings(),
        **({"id": wandb_id, "resume": "allow"} if wandb_id else {}),
    )
    # Lightning always passes W&B's deprecated ``anonymous`` argument (None by default), which makes W&B warn
    # that it has no effect on every run.
    logger._wandb_init.pop("anonymous", None)
    logger.poslab_mode = mode  # what it runs as (an online run that fell back is offline)
    try:
        logger.experiment  # start the run now (Lightning also sets trainer/global_step as x-axis)  # noqa: B018
    except BaseException:
        wandb.teardown()  # leave no half-started run for the next logger of this process
        raise
    return logger


#: W&B's folders outside the run (artifact staging, downloads, settings): the variable that moves each, and its
#: name under ``<run>/wandb-home/`` when its default cannot be written (a read-only home on a cluster node).
WANDB_HOME_FOLDERS = {"WANDB_DATA_DIR": "data", "WANDB_CACHE_DIR": "cache", "WANDB_CONFIG_DIR": "config"}
_moved: dict[str, str] = {}  # the variables poslab set, and to what (one the user set is never touched)


def place_wandb_folders(run_dir: Path) -> list[str]:
    """W&B writes its data (staging every table and artifact), cache and settings under the home directory;
    where it cannot, it fails only when the end-of-run tables are logged, after the whole training. So each
    folder whose default cannot be written goes under ``<run>/wandb-home/`` for this run (kept with the run,
    where ``wandb sync`` finds the staged files); a folder the user chose stays theirs. Returns those moved."""
    defaults = {"WANDB_DATA_DIR": platformdirs.user_data_dir("wandb"),
                "WANDB_CACHE_DIR": platformdirs.user_cache_dir("wandb"),
                "WANDB_CONFIG_DIR": str(Path.home() / ".config" / "wandb")}  # fmt: skip
    moves = []
    for variable, name in WANDB_HOME_FOLDERS.items():
        if os.environ.get(variable) not in (None, _moved.get(variable)):
            continue
        if _writable(Path(defaults[variable])):
            os.environ.pop(variable, None)
            _moved.pop(variable, None)
            continue
        _moved[variable] = os.environ[variable] = str(run_dir / "wandb-home" / name)
        moves.append(name)
    return moves


def check_staging_dir() -> None:
    """Asked now, W&B's own message (the folder, the variable to set) stops the run before anything is trained,
    not when the end-of-run tables are logged."""
    try:
        from wandb.sdk.artifacts.staging import get_staging_dir  # deferred: W&B, ~0.8 s
    except ImportError:  # another W&B layout: it reports the problem itself when it logs
        return
    get_staging_dir()


def _writable(folder: Path) -> bool:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            return True
    except OSError:
        return False


def is_wandb(logger: Any) -> bool:
    return type(logger).__name__ == "WandbLogger"


def wandb_info(logger: Any, mode: str) -> dict[str, Any]:
    """``summary.json``'s ``wandb`` entry: mode, local run folder, URL, sync command (of every offline folder
    of the run: a resumed run continues its W&B run in a new one).

    ``mode`` is the resolved ``logger.mode``; without a W&B logger (or on a DDP rank other
    than 0, whose logger holds a stand-in run) every field is None.
    """
    from lightning.pytorch.loggers.logger import DummyExperiment  # deferred: Lightning, ~7 s

    run = logger.experiment if is_wandb(logger) else None
    if run is None or isinstance(run, DummyExperiment):
        return {"mode": None, "dir": None, "url": None, "path": None, "sync_command": None}
    mode = getattr(logger, "poslab_mode", mode)
    run_dir = str(Path(run.dir).parent) if mode != "disabled" and getattr(run, "dir", None) else None
    url = getattr(run, "url", None) if mode == "online" else None
    path = getattr(run, "path", None) if mode == "online" else None
    sync = None
    if mode == "offline" and run_dir:  # every offline segment of the run: a resumed one has several
        segments = sorted(Path(run_dir).parent.glob("offline-run-*")) or [Path(run_dir)]
        sync = "wandb sync " + " ".join(shlex.quote(str(p)) for p in segments)
    return {
        "mode": mode,
        "dir": run_dir,
        "url": url,
        "path": "/".join(path) if isinstance(path, list) else path,
        "sync_command": sync,
    }


#: Lightning's x-axis for every metric it logs to W&B.
GLOBAL_STEP = "trainer/global_step"


def _wandb_run(logger: Any):
    """The logger's W&B run, or None (another logger, or a DDP rank other than 0: its run is a stand-in)."""
    from lightning.pytorch.loggers.logger import DummyExperiment  # deferred: Lightning, ~7 s

    if not is_wandb(logger):
        return None
    run = logger.experiment
    return None if isinstance(run, DummyExperiment) else run


def define_summaries(logger: Any, monitor: str, mode: str) -> None:
    """W&B's run summary of the checkpoint's metric holds its best value beside its last (``{mode, last}``:
    the runs table can show either), ``val/loss`` its minimum; test metrics, measured once at the end,
    stay out of W&B's automatic line panels (one point against the step says nothing: they are columns)."""
    run = _wandb_run(logger)
    if run is None:
        return
    run.define_metric(monitor, step_metric=GLOBAL_STEP, summary=f"{mode},last")
    if monitor != "val/loss":
        run.define_metric("val/loss", step_metric=GLOBAL_STEP, summary="min,last")
    run.define_metric("test/*", step_metric=GLOBAL_STEP, hidden=True)


def hide_from_panels(logger: Any, keys) -> None:
    """End-of-run values are runs-table columns (and the compare's bar charts), not line panels."""
    run = _wandb_run(logger)
    for key in keys if run is not None else ():
        run.define_metric(key, step_metric=GLOBAL_STEP, hidden=True)


def log_final(trainer: Any, metrics: dict[str, float], columns: bool = True) -> None:
    """Values known only at the end of a run (a median step time, the best checkpoint's score, a parameter
    count), logged through every logger of ``trainer`` at its last step, so each holds what ``summary.json``
    holds; ``columns``: kept out of W&B's line panels (:func:`hide_from_panels`)."""
    if not metrics:
        return
    for logger in trainer.loggers:
        if columns:
            hide_from_panels(logger, metrics)
        logger.log_metrics(dict(metrics), step=trainer.global_step)


def log_curve(trainer: Any, axis: str, points: dict[float, dict[str, float]]) -> None:
    """A measured curve against its own axis (``points``: x -> {key: y}): W&B plots each key against
    ``axis`` (its step metric), TensorBoard and CSV against their step, which is x."""
    for logger in trainer.loggers:
        run = _wandb_run(logger)
        if run is not None:
            run.define_metric(axis, hidden=True)
            for key in {k for values in points.values() for k in values}:
                run.define_metric(key, step_metric=axis, summary="none")  # the scalars per x are the columns
            for x, values in sorted(points.items()):
                run.log({axis: x, **values})
        elif not is_wandb(logger):
            for x, values in sorted(points.items()):
                logger.log_metrics(dict(values), step=int(x))


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
    import wandb  # deferred: W&B, ~0.8 s

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


def finish_logger(logger: Any, exit_code: int = 0) -> None:
    """Close the run so the next one in this process is separate, and flush its files; ``exit_code``: the
    process's (0: finished; an interrupted run's 128 + signal, which W&B shows as a run that did not finish)."""
    if logger is None:
        return
    if is_wandb(logger):
        import wandb  # deferred: W&B, ~0.8 s

        if logger._experiment is not None:
            logger.experiment.finish(exit_code=exit_code)
        wandb.teardown()
    else:
        logger.finalize("success" if exit_code == 0 else "failed")
