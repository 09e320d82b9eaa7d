"""One interrupt path for SIGINT, SIGTERM and SIGUSR1, in every phase of a run.

Lightning stops a loop gracefully on SIGTERM: its handler notes the signal and the loop ends at the next
batch boundary (``SIGTERMException``), where ``last.ckpt`` is saved — a resumed run then continues exactly.
Ctrl-C (SIGINT) would otherwise raise ``KeyboardInterrupt`` wherever the process is (mid-step: a
checkpoint of half a step, a resume that differs), and Lightning would exit 1. So while
:func:`handled` is active:

* inside a Lightning loop (fit, test, an end-of-run probe), SIGINT and SIGUSR1 are passed on as SIGTERM
  to this process, and every signal takes Lightning's graceful path;
* outside one (between runs, drawing a report), the signal raises :class:`~poslab.errors.RunInterrupted` at
  once: nothing is half-written there (every file is replaced atomically).

The first signal is what the run reports: ``exit 128 + signal`` (130, 143, 138) and the resume line.
Under SLURM, SIGUSR1 (``#SBATCH --signal=USR1@90``) takes the same path, and the run then requeues its job
(``poslab.run.cluster.requeue``), which resumes the run when it starts again.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from poslab.errors import RunInterrupted

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)

#: The first signal received while :func:`handled` is active (None: none yet).
_received: int | None = None


def received() -> int | None:
    return _received


def check(phase: str, resume_hint: str = "") -> None:
    """Raise :class:`RunInterrupted` if a signal arrived (a loop may have finished its last batch after it)."""
    if _received is not None:
        raise RunInterrupted(f"interrupted by {signal.Signals(_received).name} during {phase}{resume_hint}", _received)


def _lightning_has_it() -> bool:
    """Lightning's handler is installed (while one of its loops runs): it ends the loop at a batch boundary."""
    return signal.getsignal(signal.SIGTERM) is not _handler


def _handler(signum: int, frame: Any) -> None:
    global _received
    first = _received is None
    if first:
        _received = signum
    if _lightning_has_it():
        if signum != signal.SIGTERM and first:
            os.kill(os.getpid(), signal.SIGTERM)
        return
    if first:
        raise RunInterrupted(f"interrupted by {signal.Signals(signum).name}", signum)


@contextmanager
def handled() -> Iterator[None]:
    """Install the handlers for the duration of a command (nested: the outer ones stay)."""
    global _received
    if signal.getsignal(signal.SIGTERM) is _handler or threading.current_thread() is not threading.main_thread():
        yield
        return
    _received = None
    previous = {s: signal.getsignal(s) for s in SIGNALS}
    for s in previous:
        signal.signal(s, _handler)
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
