"""Progress where the output is not a terminal (a SLURM log, ``> run.log``): a live bar there prints nothing
readable until the run ends, so the run writes a plain line every twentieth of its steps and after each
validation — the step, the training loss, the last validation metric, the time so far and an estimate of
the time left."""

from __future__ import annotations

import math
import sys
import time
from typing import Any

from lightning.pytorch.callbacks.progress import ProgressBar

#: Lines over a whole run (besides one after each validation).
LINES = 20


def duration(seconds: float) -> str:
    """``1h02m``, ``3m07s``, ``42s``."""
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


class PlainProgress(ProgressBar):
    """Lightning's progress bar slot, filled with plain lines: ``step 120/1000 (12%)  train/loss 2.3100
    val/loss 2.4012  elapsed 1m02s  eta 9m05s`` (rank 0 only)."""

    def __init__(self, lines: int = LINES, stream: Any = None) -> None:
        super().__init__()
        self.lines, self.stream, self._enabled = lines, stream, True
        self.every, self.total, self.first_step, self.started = 1, math.inf, 0, time.perf_counter()

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    def on_train_start(self, trainer, pl_module) -> None:
        self.total = trainer.estimated_stepping_batches
        finite = math.isfinite(self.total)
        self.every = max(1, int(self.total) // self.lines) if finite else trainer.log_every_n_steps
        self.first_step, self.started = trainer.global_step, time.perf_counter()  # a resumed run counts from here

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if step and (step % self.every == 0 or step == self.total):
            self._line(trainer, pl_module)

    def on_validation_end(self, trainer, pl_module) -> None:
        if not trainer.sanity_checking and trainer.state.fn == "fit":
            self._line(trainer, pl_module, "validation: ")

    def _line(self, trainer, pl_module, head: str = "") -> None:
        if not (self._enabled and trainer.is_global_zero):
            return
        step, metrics = trainer.global_step, trainer.callback_metrics
        parts = [f"{head}step {step}" + (f"/{int(self.total)} ({step / self.total:.0%})" if math.isfinite(self.total)
                                         else "")]  # fmt: skip
        monitor = getattr(pl_module, "monitor", (None,))[0]
        for key in ("train/loss", monitor):
            if key and key in metrics:
                parts.append(f"{key} {float(metrics[key]):.4f}")
        elapsed, done = time.perf_counter() - self.started, step - self.first_step
        parts.append(f"elapsed {duration(elapsed)}")
        if done > 0 and math.isfinite(self.total):
            parts.append(f"eta {duration(elapsed / done * max(0, self.total - step))}")
        print("  ".join(parts), file=self.stream or sys.stdout, flush=True)
