"""The run directory and its ``summary.json`` (reports are built from these files)."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from poslab.errors import ConfigError

#: Keys every ``summary.json`` has (documented in the README).
SUMMARY_KEYS = (
    "kind",
    "run_name",
    "run_dir",
    "modality",
    "task",
    "encoder",
    "seed",
    "config",
    "metrics",
    "tables",
    "figures",
    "history",
    "checkpoints",
    "num_params",
    "wall_time_s",
    "wandb",
    "versions",
    "created",
)
#: DDP children re-run the command; they find the run name here.
RUN_NAME_ENV = "POSLAB_RUN_NAME"


def run_name(cfg: Any) -> str:
    """``run.name``, or ``<encoder>-s<seed>-<date>-<time>-<4 hex>`` (unique per launch)."""
    if cfg.run.name:
        return cfg.run.name
    inherited = os.environ.get(RUN_NAME_ENV)
    if inherited and "LOCAL_RANK" in os.environ:
        return inherited
    return f"{cfg.encoder.name}-s{cfg.seed}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def create_run_dir(cfg: Any, name: str) -> Path:
    """``<run.root>/<modality>/<name>``, as an absolute path (Lightning reports absolute ones)."""
    run_dir = (Path(cfg.run.root) / cfg.modality / name).resolve()
    if (run_dir / "summary.json").exists():
        raise ConfigError(f"run directory {run_dir} already holds a finished run; choose another run.name")
    run_dir.mkdir(parents=True, exist_ok=True)
    return run_dir


def remove_run_dir(run_dir: Path) -> None:
    """Remove what a run that failed on bad input left (nothing half-written survives)."""
    shutil.rmtree(run_dir, ignore_errors=True)


def write_json_atomic(path: Path, payload: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(payload, fh, indent=2, sort_keys=False, default=_jsonable)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_summary(run_dir: Path, summary: dict[str, Any]) -> Path:
    missing = [k for k in SUMMARY_KEYS if k not in summary]
    if missing:
        raise ValueError(f"summary lacks {missing}")
    return write_json_atomic(run_dir / "summary.json", summary)


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")
