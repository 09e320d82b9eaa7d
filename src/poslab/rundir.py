"""The run directory and its ``summary.json`` (reports are built from these files)."""

from __future__ import annotations

import hashlib
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

from poslab import cluster, locks
from poslab.cluster import RUN_NAME_ENV, is_child_rank  # noqa: F401  (re-exported: where runs are named)
from poslab.errors import ConfigError, DataError, first_line
from poslab.locks import RunInUse  # noqa: F401  (re-exported)


def run_name(cfg: Any, config_digest: str = "") -> str:
    """``run.name``; under SLURM or torchrun ``<encoder>-s<seed>-<config digest>-<launch>`` (``job1234``,
    ``torchrun-98c5014d``: every rank derives the same, and a requeued job finds it again); else
    ``<encoder>-s<seed>-<date>-<time>-<4 hex>`` (unique per launch; Lightning's DDP children inherit it)."""
    if cfg.run.name:
        return cfg.run.name
    launch = cluster.current()
    if launch.tag:
        return f"{cfg.encoder.name}-s{cfg.seed}-{config_digest[:6]}-{launch.tag}".replace("--", "-")
    inherited = os.environ.get(RUN_NAME_ENV)
    if inherited and "LOCAL_RANK" in os.environ:
        return inherited
    return f"{cfg.encoder.name}-s{cfg.seed}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def launch_wandb_id(run_dir: Path) -> str:
    """The W&B run id of a launch's run, the same on every rank and after a requeue (a local run draws one)."""
    return hashlib.sha256(str(run_dir).encode()).hexdigest()[:8]


def resumable_launch_run(run_dir: Path) -> bool:
    """A SLURM job or torchrun launch that finds its own run unfinished (requeued, restarted): it resumes it."""
    return (
        cluster.current().kind != "local"
        and (run_dir / "checkpoints" / "last.ckpt").is_file()
        and not (run_dir / "summary.json").exists()
    )


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
    """Whether a live process holds ``run_dir``'s lock (a lock left by a finished or killed run does not)."""
    return locks.in_use(run_dir)


#: Run directories this process holds (a comparison claims a run, then trains it: the one lock).
_HELD: set[Path] = set()


@contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """This process's exclusive use of ``run_dir`` while it trains (:mod:`poslab.locks`: an OS lock, or lock
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


def shareable(fd: int) -> None:
    """Give a file made by ``tempfile.mkstemp`` (mode 0600) the mode a plain ``open`` gives (0666 less the
    umask): data caches and summaries are read by other users of a shared machine."""
    mask = os.umask(0)
    os.umask(mask)
    os.fchmod(fd, 0o666 & ~mask)


def _write_atomic(path: Path, data: bytes) -> None:
    """``path`` replaced atomically: a reader sees the old bytes or the new, never half of them."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    shareable(fd)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_atomic(path, text.encode())
    return path


def write_json_atomic(path: Path, payload: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_atomic(path, (json.dumps(payload, indent=2, sort_keys=False, default=_jsonable) + "\n").encode())
    return path


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


# -- checkpoint digests -------------------------------------------------------------------------
DIGEST_SUFFIX = ".sha256"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


#: Beside a checkpoint being replaced: the new checkpoint's digest, written before the replace, removed
#: once the digest file has it (:func:`save_with_digest`).
PENDING_SUFFIX = ".sha256.pending"


def _beside(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def save_with_digest(path: str | Path, data: bytes) -> str:
    """Write a checkpoint's bytes with their SHA-256 beside them (``<path>.sha256``, ``sha256sum`` format);
    returns the digest. The new digest goes down first, as pending, then the checkpoint is replaced, then
    the digest file: a kill at any point leaves a checkpoint that matches a digest on disk (the recorded one
    or the pending one), and any other change still reads as corruption (:func:`verify_digest`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(data).hexdigest()
    line = f"{digest}  {path.name}\n".encode()
    pending = _beside(path, PENDING_SUFFIX)
    _write_atomic(pending, line)
    _write_atomic(path, data)
    _write_atomic(_beside(path, DIGEST_SUFFIX), line)
    pending.unlink(missing_ok=True)
    return digest


def remove_with_digest(path: str | Path) -> None:
    """A checkpoint and the digests beside it."""
    for suffix in ("", DIGEST_SUFFIX, PENDING_SUFFIX):
        _beside(Path(path), suffix).unlink(missing_ok=True)


def _digest_in(sidecar: Path) -> str | None:
    try:
        return sidecar.read_text().split()[0]
    except (OSError, IndexError):
        return None


def recorded_digest(path: str | Path) -> str | None:
    return _digest_in(_beside(Path(path), DIGEST_SUFFIX))


def verify_digest(path: str | Path) -> None:
    """A checkpoint whose bytes differ from the digest recorded when it was saved: one clear line. A save
    cut between its replace and its digest left the new digest pending: that one matches too. Without a
    digest (missing, empty, not a file) the checkpoint is verified by loading it (:func:`verify_by_loading`)."""
    path = Path(path)
    expected = {d for d in (recorded_digest(path), _digest_in(_beside(path, PENDING_SUFFIX))) if d}
    if not expected:
        verify_by_loading(path)
        return
    if file_sha256(path) not in expected:
        raise DataError(
            f"checkpoint {path} does not match the SHA-256 recorded when it was saved (corrupt or replaced); "
            f"expected {' or '.join(sorted(d[:12] + '…' for d in expected))}"
        )


#: What training learned, in a Lightning checkpoint: every float in it must be finite (callbacks' states may
#: hold an infinity on purpose: a checkpoint callback's best score before the first validation).
LEARNED_STATE = ("state_dict", "optimizer_states")


def verify_by_loading(path: Path) -> None:
    """A checkpoint with no digest is read whole (tensors only, ``weights_only``) and every floating-point
    tensor of :data:`LEARNED_STATE` — weights, optimiser moments — must be finite; otherwise it is refused
    in one line."""
    import torch

    why = "has no SHA-256 beside it"
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # truncated, empty, not a checkpoint
        reason = first_line(exc).split(". ")[0]
        raise DataError(f"cannot read checkpoint {path}: {reason} (and it {why} to check it by)") from None
    learned = {k: payload[k] for k in LEARNED_STATE if isinstance(payload, dict) and k in payload}
    if not learned:
        raise DataError(f"checkpoint {path} {why} and holds no model weights (not a poslab checkpoint); refusing it")
    bad = [name for name, tensor in _tensors(learned) if tensor.is_floating_point() and not tensor.isfinite().all()]
    if bad:
        more = f" and {len(bad) - 1} more" if len(bad) > 1 else ""
        raise DataError(f"checkpoint {path} {why} and holds non-finite values in {bad[0]}{more}; refusing it")


def _tensors(value: Any, name: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted name, tensor) of every tensor in a nested checkpoint payload."""
    import torch

    if isinstance(value, torch.Tensor):
        yield name or "<root>", value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _tensors(item, f"{name}.{key}" if name else str(key))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from _tensors(item, f"{name}[{index}]")
