"""The run directory and its ``summary.json`` (reports are built from these files)."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from poslab.errors import ConfigError, DataError

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
    "checkpoint_sha256",
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


def is_child_rank() -> bool:
    """A DDP process other than the one that launched the run (they share its directory)."""
    return any(int(os.environ.get(k, "0") or 0) > 0 for k in ("LOCAL_RANK", "NODE_RANK", "RANK"))


def create_run_dir(cfg: Any, name: str) -> Path:
    """``<run.root>/<modality>/<name>``, as an absolute path (Lightning reports absolute ones).

    A directory that holds a finished run, or the checkpoints of an unfinished one, is refused: a new run
    there would mix its checkpoints with the old ones (``best-v1.ckpt``)."""
    run_dir = (Path(cfg.run.root) / cfg.modality / name).resolve()
    if (run_dir / "summary.json").exists():
        raise ConfigError(f"run directory {run_dir} already holds a finished run; choose another run.name")
    if not is_child_rank() and any((run_dir / "checkpoints").glob("*.ckpt")):
        raise ConfigError(
            f"run directory {run_dir} holds an unfinished run's checkpoints; continue it with resume={run_dir}, "
            "or remove the directory to start again"
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    return run_dir


def run_in_use(run_dir: Path) -> bool:
    """Whether a live process holds ``run_dir``'s lock (a lock file left by a finished or killed run does not)."""
    import fcntl

    try:
        fd = os.open(run_dir / ".lock", os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


class RunInUse(ConfigError):
    """Another process is training in this run directory."""


@contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """This process's exclusive use of ``run_dir`` while it trains (an OS file lock on ``.lock``, released
    when the process ends, even by SIGKILL); a second process is refused with :class:`RunInUse`. DDP
    children share the lock of the process that launched them."""
    if is_child_rank():
        yield
        return
    import fcntl

    path = run_dir / ".lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            raise RunInUse(f"run directory {run_dir} is in use by another poslab process (pid {holder})") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def remove_run_dir(run_dir: Path) -> None:
    """Remove what a run that failed on bad input left (nothing half-written survives)."""
    shutil.rmtree(run_dir, ignore_errors=True)


def shareable(fd: int) -> None:
    """Give a file made by ``tempfile.mkstemp`` (mode 0600) the mode a plain ``open`` gives (0666 less the
    umask): data caches and summaries are read by other users of a shared machine."""
    mask = os.umask(0)
    os.umask(mask)
    os.fchmod(fd, 0o666 & ~mask)


def write_json_atomic(path: Path, payload: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    shareable(fd)
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


# -- checkpoint digests -------------------------------------------------------------------------
DIGEST_SUFFIX = ".sha256"


def file_sha256(path: Path) -> str:
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


#: The line a checkpoint's digest file gains while a new save replaces the checkpoint (:func:`mark_saving`).
SAVING = "saving"


def _write_sidecar(path: Path, text: str) -> None:
    """``<path>.sha256`` replaced atomically: a reader sees the old text or the new, never half of it."""
    sidecar = path.with_name(path.name + DIGEST_SUFFIX)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{sidecar.name}.", suffix=".tmp")
    shareable(fd)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, sidecar)


def record_digest(path: str | Path) -> str:
    """Write ``<path>.sha256`` (``sha256sum`` format) next to a checkpoint just saved; returns the digest."""
    path = Path(path)
    digest = file_sha256(path)
    _write_sidecar(path, f"{digest}  {path.name}\n")
    return digest


def mark_saving(path: str | Path) -> None:
    """Before a save replaces ``path``: its digest file says so. Lightning replaces a checkpoint atomically,
    but its new digest is written after it; a kill in between would leave the new checkpoint beside the old
    digest, which :func:`verify_digest` would read as corruption and refuse to resume from."""
    path = Path(path)
    sidecar = path.with_name(path.name + DIGEST_SUFFIX)
    if sidecar.is_file():
        _write_sidecar(path, f"{sidecar.read_text().splitlines()[0]}\n{SAVING}\n")


def save_interrupted(path: str | Path) -> bool:
    """Whether a save of ``path`` began (:func:`mark_saving`) and its digest was never written."""
    sidecar = Path(path).with_name(Path(path).name + DIGEST_SUFFIX)
    try:
        return SAVING in sidecar.read_text().splitlines()[1:]
    except OSError:
        return False


def recorded_digest(path: str | Path) -> str | None:
    sidecar = Path(path).with_name(Path(path).name + DIGEST_SUFFIX)
    try:
        return sidecar.read_text().split()[0]
    except (OSError, IndexError):
        return None


def verify_digest(path: str | Path) -> None:
    """A checkpoint whose bytes differ from the digest recorded when it was saved: one clear line."""
    expected = recorded_digest(path)
    # a save cut before its digest: the checkpoint is whole (replaced atomically), its digest unwritten
    if expected is not None and file_sha256(Path(path)) != expected and not save_interrupted(path):
        raise DataError(
            f"checkpoint {path} does not match the SHA-256 recorded when it was saved (corrupt or replaced); "
            f"expected {expected[:12]}…"
        )
