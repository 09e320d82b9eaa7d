"""User-facing errors.

Anything raised as a :class:`PoslabError` is bad *input* (a config key, a CLI
flag, a data file): the CLI prints its message as one line and exits non-zero,
never a traceback. Bugs stay ordinary exceptions so they keep their traceback.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class PoslabError(Exception):
    """Bad user input; the message is one self-contained line."""


class ConfigError(PoslabError):
    """An invalid configuration: unknown key, wrong type, unknown choice."""


class DataError(PoslabError):
    """A data file that is missing, corrupt or fails its checksum."""


class RunInterrupted(PoslabError):
    """A run stopped by a signal: its checkpoint is saved, and it exits with 128 + the signal number."""

    def __init__(self, message: str, signal_number: int) -> None:
        super().__init__(message)
        self.exit_code = 128 + signal_number


class NonFiniteLoss(PoslabError):
    """Training produced a NaN / inf loss: the run stops there, its earlier checkpoints kept."""


def first_line(exc: BaseException) -> str:
    """An exception's first line, or its type's name when it has no message (a 0-byte file, say)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The closest valid spelling of ``word``, or None when nothing is close."""
    matches = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.5)
    return matches[0] if matches else None


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` or an empty string."""
    match = closest(word, choices)
    return f" (did you mean '{match}'?)" if match else ""
