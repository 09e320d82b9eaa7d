"""One writer per run directory, on a laptop and on a cluster's shared file system.

Two ways to hold ``<run dir>/.lock``, chosen by ``POSLAB_LOCKS``:

* ``flock`` (the default): an OS lock on the file, released when the process ends — even by SIGKILL.
  Some network file systems refuse it (NFS without lockd, some Lustre / GPFS mounts: ``ENOLCK``,
  ``EOPNOTSUPP``); there poslab falls back to files by itself.
* ``files``: an exclusive file, ``.lock.held``, created with ``O_CREAT | O_EXCL`` (atomic on NFSv3+, Lustre,
  GPFS) and holding ``host pid``. Its holder touches it every :data:`HEARTBEAT_S` seconds. A holder on this
  host that no longer runs is taken over at once; one on another host cannot be checked from here, so it is
  refused with its name and how to clear it until its file is :func:`stale_seconds` old (a node that died
  stops touching it), then taken over. The age is read on the file system's clock (:func:`age`), never
  this host's: a host whose clock runs 15 minutes ahead must not find a live holder's file stale. A
  takeover happens under a second exclusive file (``.lock.steal``), so two processes finding the same
  stale holder cannot both take it. Use this mode where ``flock`` succeeds but locks only the node it runs
  on (NFS mounted with ``local_lock=all``).

A run directory that can be locked neither way (``ESTALE``, ``EIO``, ...) is one line naming it and the cause.

A leaf: it imports nothing of poslab's but the errors.
"""

from __future__ import annotations

import errno
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from poslab.errors import ConfigError

LOCKS_ENV = "POSLAB_LOCKS"
MODES = ("flock", "files")
#: errno values of a file system that does not do ``flock``.
NO_FLOCK = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}
HELD = ".lock.held"
STEAL = ".lock.steal"
#: Touched to read the file system's clock (:func:`age`).
CLOCK = ".lock.clock"
#: How often a lock file's holder touches it, and the age at which a holder (on any host) counts as gone.
HEARTBEAT_S = 30.0
STALE_S = 600.0
STALE_ENV = "POSLAB_LOCK_STALE_S"


class RunInUse(ConfigError):
    """Another process is training in this run directory."""


def stale_seconds() -> float:
    """How long an untouched lock file's holder counts as alive (``POSLAB_LOCK_STALE_S``, default 600)."""
    raw = os.environ.get(STALE_ENV, "") or str(STALE_S)
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise ConfigError(f"{STALE_ENV}={raw!r} must be a number of seconds > 0")
    return value


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
    stop = threading.Event()
    beat = threading.Thread(target=_heartbeat, args=(run_dir / HELD, stop), daemon=True)
    beat.start()
    try:
        yield
    finally:
        stop.set()
        beat.join()
        if _file_holder(run_dir) == (socket.gethostname(), os.getpid()):  # still ours: never another's
            (run_dir / HELD).unlink(missing_ok=True)


def _heartbeat(path: Path, stop: threading.Event) -> None:
    """Touch ``path`` while the lock is held, so other hosts can tell a live holder from a dead node."""
    while not stop.wait(HEARTBEAT_S):
        try:
            os.utime(path)
        except OSError:
            return


def in_use(run_dir: Path) -> bool:
    """Whether a live process holds ``run_dir`` (a lock left by a finished or killed run does not count)."""
    holder = _file_holder(run_dir)
    if holder is not None and not _gone(run_dir / HELD, holder):
        return True
    if mode() == "files":
        return False
    import fcntl  # deferred: POSIX only

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
    import fcntl  # deferred: POSIX only

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
        raise cannot_lock(path, exc) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{socket.gethostname()} {os.getpid()}\n".encode(), 0)
    return fd


def cannot_lock(path: Path, exc: OSError) -> ConfigError:
    cause = os.strerror(exc.errno) if exc.errno else str(exc)
    return ConfigError(
        f"cannot lock {path}: {cause[0].lower()}{cause[1:]}; the run root must allow one of {LOCKS_ENV}="
        f"{' or '.join(MODES)}"
    )


def _take_file(run_dir: Path) -> None:
    """Create ``.lock.held`` exclusively; a holder that is gone (its process, or its node's heartbeat) is taken
    over."""
    path = run_dir / HELD
    for _ in range(3):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            holder = _file_holder(run_dir)
            if holder is not None and _gone(path, holder):
                _take_over(run_dir, holder)
                continue
            if holder is not None and holder[0] != socket.gethostname():
                after = stale_seconds()
                raise RunInUse(
                    f"run directory {run_dir} is held by pid {holder[1]} on {holder[0]} ({path}); it is taken over "
                    f"once that node stops touching it for {after:.0f} s; if that process is gone, remove {path}"
                ) from None
            shown = f"pid {holder[1]}" if holder else "?"
            raise RunInUse(f"run directory {run_dir} is in use by another poslab process ({shown})") from None
        except OSError as exc:
            raise cannot_lock(path, exc) from None
        with os.fdopen(fd, "w") as fh:
            fh.write(f"{socket.gethostname()} {os.getpid()}\n")
        return
    raise RunInUse(f"run directory {run_dir}: could not take {path}")


def _gone(path: Path, holder: tuple[str, int]) -> bool:
    """Its process has ended (this host), or its heartbeat stopped (any host: a recycled pid too)."""
    try:
        stale = age(path) > stale_seconds()
    except OSError:
        return True  # removed meanwhile: free
    return stale or not _alive(*holder)


def age(path: Path) -> float:
    """Seconds since ``path`` was last touched, by the clock that stamped it: a file touched now beside it (the
    file server's clock on NFS, the kernel's locally) is the present. Only where nothing can be written there
    does this host's clock stand in."""
    stamped = path.stat().st_mtime
    clock = path.parent / CLOCK
    try:
        os.close(os.open(clock, os.O_WRONLY | os.O_CREAT, 0o644))
        os.utime(clock)  # no times given: the file system stamps its own now
        now = clock.stat().st_mtime
    except OSError:
        now = time.time()
    return now - stamped


def _take_over(run_dir: Path, stale: tuple[str, int]) -> None:
    """Remove a gone holder's file, under ``.lock.steal`` so that of two processes finding the same holder
    only one removes it (the other sees the new holder and is refused)."""
    steal = run_dir / STEAL
    try:
        fd = os.open(steal, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        if _age(steal) > stale_seconds():  # a takeover that died halfway
            steal.unlink(missing_ok=True)
        return
    try:
        os.close(fd)
        if _file_holder(run_dir) == stale:  # not yet replaced by a process that took it first
            (run_dir / HELD).unlink(missing_ok=True)
    finally:
        steal.unlink(missing_ok=True)


def _age(path: Path) -> float:
    try:
        return age(path)
    except OSError:
        return 0.0  # removed meanwhile


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
