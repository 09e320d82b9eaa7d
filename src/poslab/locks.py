"""One writer per run directory, on a laptop and on a cluster's shared file system.

Two ways to hold ``<run dir>/.lock``, chosen by ``POSLAB_LOCKS``:

* ``flock`` (the default): an OS lock on the file, released when the process ends — even by SIGKILL.
  Some network file systems refuse it (NFS without lockd, some Lustre / GPFS mounts: ``ENOLCK``,
  ``EOPNOTSUPP``); there poslab falls back to files by itself.
* ``files``: an exclusive file, ``.lock.held``, created with ``O_CREAT | O_EXCL`` (atomic on NFSv3+, Lustre,
  GPFS) and holding ``host pid``. A holder on this host that no longer runs is taken over; one on another
  host cannot be checked from here, so it is refused with its name and how to clear it. Use this where
  ``flock`` succeeds but locks only the node it runs on (NFS mounted with ``local_lock=all``).

A leaf: it imports nothing of poslab's but the errors.
"""

from __future__ import annotations

import errno
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from poslab.errors import ConfigError

LOCKS_ENV = "POSLAB_LOCKS"
MODES = ("flock", "files")
#: errno values of a file system that does not do ``flock``.
NO_FLOCK = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}
HELD = ".lock.held"


class RunInUse(ConfigError):
    """Another process is training in this run directory."""


def mode() -> str:
    chosen = os.environ.get(LOCKS_ENV, "flock") or "flock"
    if chosen not in MODES:
        raise ConfigError(f"{LOCKS_ENV}={chosen!r} is not a way to lock run directories; valid: {', '.join(MODES)}")
    return chosen


@contextmanager
def exclusive(run_dir: Path) -> Iterator[None]:
    """This process's exclusive use of ``run_dir`` while the block runs; a second process is refused with
    :class:`RunInUse` naming the holder."""
    if mode() == "flock":
        held = _flock(run_dir)
        if held is not None:
            try:
                yield
            finally:
                os.close(held)  # closing releases the lock
            return
    _take_file(run_dir)
    try:
        yield
    finally:
        (run_dir / HELD).unlink(missing_ok=True)


def in_use(run_dir: Path) -> bool:
    """Whether a live process holds ``run_dir`` (a lock left by a finished or killed run does not count)."""
    holder = _file_holder(run_dir)
    if holder is not None and _alive(*holder):
        return True
    if mode() == "files":
        return False
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
    except OSError as exc:
        if exc.errno in NO_FLOCK:  # this file system has no flock: only the lock files say
            return False
        raise
    finally:
        os.close(fd)


def _flock(run_dir: Path) -> int | None:
    """The open, locked ``.lock`` (None: the file system does not lock; the caller falls back to files)."""
    import fcntl

    path = run_dir / ".lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise RunInUse(f"run directory {run_dir} is in use by another poslab process ({_describe(holder)})") from None
    except OSError as exc:
        os.close(fd)
        if exc.errno in NO_FLOCK:
            return None
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{socket.gethostname()} {os.getpid()}\n".encode(), 0)
    return fd


def _take_file(run_dir: Path) -> None:
    """Create ``.lock.held`` exclusively; a holder on this host that is gone is taken over."""
    path = run_dir / HELD
    for _ in range(2):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            holder = _file_holder(run_dir)
            if holder is not None and holder[0] == socket.gethostname() and not _alive(*holder):
                path.unlink(missing_ok=True)  # its process is gone (killed): the lock is stale
                continue
            if holder is not None and holder[0] != socket.gethostname():
                raise RunInUse(
                    f"run directory {run_dir} is held by pid {holder[1]} on {holder[0]} ({path}); if that process "
                    f"is gone, remove {path}"
                ) from None
            shown = f"pid {holder[1]}" if holder else "?"
            raise RunInUse(f"run directory {run_dir} is in use by another poslab process ({shown})") from None
        with os.fdopen(fd, "w") as fh:
            fh.write(f"{socket.gethostname()} {os.getpid()}\n")
        return
    raise RunInUse(f"run directory {run_dir}: could not take {path}")


def _file_holder(run_dir: Path) -> tuple[str, int] | None:
    try:
        host, pid = (run_dir / HELD).read_text().split()[:2]
        return host, int(pid)
    except (OSError, ValueError):
        return None


def _alive(host: str, pid: int) -> bool:
    """Whether ``pid`` runs on ``host`` (another host's process is assumed alive: it cannot be seen)."""
    if host != socket.gethostname():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def _describe(holder: str) -> str:
    parts = holder.split()
    return f"pid {parts[1]} on {parts[0]}" if len(parts) == 2 else f"pid {holder}"
