"""The run directory: its name, where it lies, who holds it (one writer: :mod:`poslab.run.locks`), and clearing
what a failed run left."""

from __future__ import annotations

import hashlib
import secrets
import shlex
import shutil
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Optional

from poslab.config.ranges import AT_LEAST_1
from poslab.errors import ConfigError
from poslab.run import cluster, locks
from poslab.run.cluster import is_child_rank
from poslab.run.locks import RunInUse  # noqa: F401  (re-exported)

#: A run name is one path component of at most this many characters.
RUN_NAME_MAX = 120


@dataclass
class RunConfig:
    """``run.*``: where runs land (``<root>/<modality>/<name>``) and how often ``last.ckpt`` is written."""

    root: str = "???"  # the YAML sets it
    name: Optional[str] = "???"
    checkpoint_every_n_steps: Annotated[Optional[int], AT_LEAST_1] = None


def check_run(run: Mapping[str, Any]) -> None:
    """``run.name`` is one folder name, and neither it nor ``run.root`` holds a control character (a newline in
    a path would print as a space and the path could not be typed back): one line otherwise."""
    name = run.get("name")
    if name is not None and (name in ("", ".", "..") or "/" in name or "\\" in name or len(name) > RUN_NAME_MAX):
        raise ConfigError(
            f"run.name must be one folder name (no '/', not '.' or '..', 1-{RUN_NAME_MAX} characters), "
            f"got {name[:60]!r}{'…' if len(name) > 60 else ''}"
        )
    for key in ("root", "name"):
        if any(ord(c) < 32 or ord(c) == 127 for c in str(run.get(key) or "")):
            raise ConfigError(f"run.{key} must not hold control characters (a newline, a tab), got {run[key]!r}")
    try:
        Path(str(run.get("root") or ".")).resolve()
    except (RuntimeError, OSError):  # a symbolic link loop (RuntimeError before Python 3.13, then OSError)
        raise ConfigError(
            f"run.root {run['root']!r} lies in a loop of symbolic links; choose another run.root"
        ) from None


def run_name(cfg: Any, config_digest: str = "") -> str:
    """``run.name``; under SLURM or torchrun ``<encoder>-s<seed>-<config digest>-<launch>`` (``job1234``,
    ``torchrun-98c5014d``: every rank derives the same, and a requeued job finds it again); else
    ``<encoder>-s<seed>-<date>-<time>-<4 hex>`` (unique per launch; Lightning's DDP children inherit it)."""
    if cfg.run.name:
        return cfg.run.name
    launch = cluster.current()
    if launch.tag:
        return f"{cfg.encoder.name}-s{cfg.seed}-{config_digest[:6]}-{launch.tag}".replace("--", "-")
    inherited = cluster.inherited_run_name()
    if inherited:
        return inherited
    return f"{cfg.encoder.name}-s{cfg.seed}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def launch_wandb_id(run_dir: Path) -> str:
    """The W&B run id of a launch's run, the same on every rank and after a requeue (a local run draws one)."""
    return hashlib.sha256(str(run_dir).encode()).hexdigest()[:8]


def resume_command(run_dir: Path | str) -> str:
    """The command that continues the run in ``run_dir``, quoted for the shell (a space or a quote in the path)."""
    return f"poslab train {shlex.quote(f'resume={run_dir}')}"


def create_run_dir(cfg: Any, name: str) -> Path:
    """``<run.root>/<modality>/<name>``, as an absolute path (Lightning reports absolute ones).

    A directory that holds a finished run, or the checkpoints of an unfinished one, is refused: a new run
    there would mix its checkpoints with the old ones (``best-v1.ckpt``)."""
    run_dir = (Path(cfg.run.root) / cfg.modality / name).resolve()
    if (run_dir / "summary.json").exists():
        raise ConfigError(f"run directory {run_dir} already holds a finished run; choose another run.name")
    if not is_child_rank() and any((run_dir / "checkpoints").glob("*.ckpt")):
        raise ConfigError(
            f"run directory {run_dir} holds an unfinished run's checkpoints; continue it with "
            f"{resume_command(run_dir)}, or remove the directory to start again"
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    return run_dir


def run_in_use(run_dir: Path) -> bool:
    """Whether a live process holds ``run_dir``'s lock (a lock left by a finished or killed run does not)."""
    return locks.in_use(run_dir)


#: Run directories this process holds (a comparison claims a run, then trains it: the one lock).
_HELD: set[Path] = set()


@contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """This process's exclusive use of ``run_dir`` while it trains (:mod:`poslab.run.locks`: an OS lock, or lock
    files where the file system has none); a second process is refused with :class:`RunInUse`. The other
    ranks of a launch share the lock of its rank 0; a lock this process holds already is held once."""
    key = Path(run_dir).resolve()
    if is_child_rank() or key in _HELD:
        yield
        return
    with locks.exclusive(run_dir):
        _HELD.add(key)
        try:
            yield
        finally:
            _HELD.discard(key)


def clear_run_dir(run_dir: Path) -> None:
    """Empty a run directory this process holds, keeping its lock files (removing a held lock file would let
    another process lock a new one)."""
    for entry in Path(run_dir).iterdir():
        if entry.name in (".lock", locks.HELD):
            continue
        shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink(missing_ok=True)


def remove_run_dir(run_dir: Path) -> None:
    """Remove what a run that failed on bad input left (nothing half-written survives)."""
    shutil.rmtree(run_dir, ignore_errors=True)
