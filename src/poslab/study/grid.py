"""One comparison grid shared by several workers: one compare id, each run trained once, one report.

The workers of ``poslab compare ... workers=N`` (or ``worker=I/N``: N independent jobs, a SLURM array) plan the
same grid, so they name the same run directories. They meet in files beside those runs (the grid's files
under ``<run.root>/.grids/``, the runs' in their directories):

* ``<modality>-<grid>.json`` — the compare id, created once (``O_EXCL``) by the first worker and read by the
  others, so every run is tagged ``compare:<id>`` and the report run is one;
* each run's lock (:mod:`poslab.run.locks`) — the claim: a worker trains a run only while it holds it, and a claim
  whose process is gone (killed, preempted) is free again, so another worker resumes that run;
* ``<run>/.failed`` — a run that failed for this compare id: settled, not retried by the other workers (an
  interrupted worker forgets its own, so the same command, rerun, retries them);
* ``<modality>-<grid>-<id>.report/`` — the report claim: once every run is settled, the worker that holds its
  lock (:mod:`poslab.run.locks`, released when its process ends, however it ends) writes the report and the
  W&B report run, marks the claim ``done``, then removes the compare id (the next comparison of the grid gets
  a new one); a worker of this comparison finishing later finds it done and does not report, and a worker
  killed while reporting leaves the claim to the next one (the same command run again).

A leaf beside :mod:`poslab.run.rundir`: it imports nothing that trains.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from poslab.errors import ConfigError
from poslab.files import write_json_atomic
from poslab.run import locks

FAILED = ".failed"
REPORTED = "done"  # in a report claim: the report is written


def parse_worker(text: str) -> tuple[int, int]:
    """``I/N`` (0 <= I < N) -> ``(I, N)``; anything else is one line."""
    index, _, count = str(text).partition("/")
    try:
        i, n = int(index), int(count)
    except ValueError:
        i, n = -1, 0
    if not (n >= 1 and 0 <= i < n):
        raise ConfigError(f"worker={text!r} must be I/N with 0 <= I < N (e.g. worker=0/4)")
    return i, n


@dataclass(frozen=True)
class SharedGrid:
    """The files the workers of one grid meet in (``folder``: ``<run.root>/.grids``, apart from the runs)."""

    folder: Path
    runs: tuple[Path, ...]

    @classmethod
    def of(cls, run_dirs: list[Path]) -> SharedGrid:
        return cls(run_dirs[0].parent.parent / ".grids", tuple(run_dirs))

    @property
    def key(self) -> str:
        names = sorted(f"{p.parent.name}/{p.name}" for p in self.runs)
        return f"{self.runs[0].parent.name}-" + hashlib.sha256("\n".join(names).encode()).hexdigest()[:10]

    @property
    def state(self) -> Path:
        return self.folder / f"{self.key}.json"

    def report_claim(self, compare_id: str) -> Path:
        return self.folder / f"{self.key}-{compare_id}.report"

    def compare_id(self) -> str:
        """The grid's compare id: made by the first worker, read by every other one."""
        self.folder.mkdir(parents=True, exist_ok=True)
        made = f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
        try:
            fd = os.open(self.state, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            for _ in range(50):  # the first worker is writing it
                try:
                    return json.loads(self.state.read_text())["compare_id"]
                except (OSError, ValueError, KeyError):
                    time.sleep(0.1)
            raise ConfigError(f"{self.state} holds no compare id; remove it to start the comparison again") from None
        with os.fdopen(fd, "w") as fh:
            json.dump({"compare_id": made, "runs": len(self.runs)}, fh)
        return made

    def failed(self, run_dir: Path, compare_id: str) -> str | None:
        """The error a worker recorded for ``run_dir`` in this comparison, or None."""
        try:
            record = json.loads((run_dir / FAILED).read_text())
        except (OSError, ValueError):
            return None
        return record.get("error") if record.get("compare_id") == compare_id else None

    def mark_failed(self, run_dir: Path, compare_id: str, error: str) -> None:
        record = {"compare_id": compare_id, "error": error, "host": socket.gethostname(), "pid": os.getpid()}
        write_json_atomic(run_dir / FAILED, record)

    def forget_own_failures(self, compare_id: str) -> None:
        """An interrupted worker's failures are not settled: its comparison keeps its id, so the same command
        run again (or another worker) retries them, as a rerun retries any failed run."""
        me = (socket.gethostname(), os.getpid())
        for run_dir in self.runs:
            try:
                record = json.loads((run_dir / FAILED).read_text())
            except (OSError, ValueError):
                continue
            if record.get("compare_id") == compare_id and (record.get("host"), record.get("pid")) == me:
                (run_dir / FAILED).unlink(missing_ok=True)

    def settled(self, run_dir: Path, compare_id: str) -> bool:
        return (run_dir / "summary.json").exists() or self.failed(run_dir, compare_id) is not None

    @contextmanager
    def reporting(self, compare_id: str) -> Iterator[bool]:
        """True while this worker writes comparison ``compare_id``'s report: it holds the claim's lock and no
        worker has written the report yet. A holder that died (kill -9 mid-report) held nothing: its claim
        is taken by the next worker to ask."""
        claim = self.report_claim(compare_id)
        claim.mkdir(parents=True, exist_ok=True)
        held = ExitStack()
        try:
            held.enter_context(locks.exclusive(claim))
        except locks.RunInUse:  # another worker writes it now
            yield False
            return
        with held:
            yield not (claim / REPORTED).exists()

    def reported(self, compare_id: str) -> None:
        """The report is written (call while :meth:`reporting` holds the claim): no worker writes another."""
        (self.report_claim(compare_id) / REPORTED).touch()

    def close(self, compare_id: str) -> None:
        """The report is written: the next comparison of this grid gets a new id (older claims go)."""
        self.state.unlink(missing_ok=True)
        for claim in self.folder.glob(f"{self.key}-*.report"):
            if claim != self.report_claim(compare_id):
                shutil.rmtree(claim, ignore_errors=True)
