"""User-facing errors.

Anything raised as a :class:`PoslabError` is bad *input* (a config key, a CLI
flag, a data file): the CLI prints its message as one line and exits non-zero,
never a traceback. Bugs stay ordinary exceptions so they keep their traceback.
"""

from __future__ import annotations

import difflib
import errno
import os
import re
from collections.abc import Iterable


class PoslabError(Exception):
    """Bad user input; the message is one self-contained line."""


class ConfigError(PoslabError):
    """An invalid configuration: unknown key, wrong type, unknown choice."""


class DataError(PoslabError):
    """A data file that is missing, corrupt or fails its checksum."""


class RunInterrupted(BaseException):
    """A run stopped by a signal: its checkpoint is saved, and it exits with 128 + the signal number.

    Like ``KeyboardInterrupt``, not an ``Exception``: the signal may arrive anywhere (reading a YAML, starting
    W&B, between a comparison's runs), and the handlers there that turn a failure into one line or into a
    failed run must not swallow it."""

    def __init__(self, message: str, signal_number: int) -> None:
        super().__init__(message)
        self.exit_code = 128 + signal_number


class RunStopped(PoslabError):
    """A run that stopped after it began training: its directory and checkpoints so far are kept."""


class NonFiniteLoss(RunStopped):
    """Training produced a NaN / inf loss: the run stops there, its earlier checkpoints kept."""


#: The file-system refusals worth their own words (the others take the system's: ``os.strerror``).
FILESYSTEM_ERRORS = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.ENOTDIR: "a file stands where a folder should be",
    errno.EEXIST: "a file stands where a folder should be",
    errno.EISDIR: "a folder stands where a file should be",
    errno.EACCES: "permission denied",
    errno.EFBIG: "the file is larger than this file system allows",
    errno.EPERM: "operation not permitted",
}


def os_error_line(exc: OSError) -> str:
    """An operating-system error as one line: the path and the cause (``cannot write runs/x: read-only file
    system``); a library's own message where it names no path (W&B's names the folder and what to set)."""
    if exc.filename is None:
        return first_line(exc)
    if exc.errno in FILESYSTEM_ERRORS:
        return f"cannot write {exc.filename}: {FILESYSTEM_ERRORS[exc.errno]}"
    cause = os.strerror(exc.errno) if exc.errno else first_line(exc)
    return f"cannot use {exc.filename}: {cause[0].lower()}{cause[1:]}"


def own_message(exc: BaseException) -> str:
    """An exception's message. One raised in a data loader's worker comes back with the worker's traceback as its
    message (PyTorch's ``ExceptionWrapper``): its own message is the last line's, after the type's name."""
    text = str(exc).strip()
    if text.startswith("Caught ") and "Original Traceback" in text:
        return text.splitlines()[-1].split(": ", 1)[-1]
    return text


def first_line(exc: BaseException) -> str:
    """An exception's first line, or its type's name when it has no message (a 0-byte file, say)."""
    text = own_message(exc)
    return text.splitlines()[0] if text else type(exc).__name__


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The closest valid spelling of ``word``, or None when nothing is close."""
    matches = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.5)
    return matches[0] if matches else None


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` or an empty string."""
    match = closest(word, choices)
    return f" (did you mean '{match}'?)" if match else ""


def memory_problem(exc: BaseException) -> str | None:
    """What an allocation failure asked for (``"447.0 GiB"``, or ``"more"``), or None when ``exc`` is not one:
    PyTorch reports a failed CPU allocation as a ``RuntimeError`` (``DefaultCPUAllocator: can't allocate
    memory: you tried to allocate N bytes``) and a CUDA one as ``torch.OutOfMemoryError``."""

    text = str(exc)
    if not (isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError"
            or "can't allocate memory" in text or "out of memory" in text.lower()):  # fmt: skip
        return None
    asked = re.search(r"allocate (\d+) bytes", text) or re.search(r"allocate ([\d.]+ [KMGT]iB)", text)
    if not asked:
        return "more"
    value = asked.group(1)
    return f"{int(value) / 2**30:.1f} GiB" if value.isdigit() else value
