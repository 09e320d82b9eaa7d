"""``poslab compare ... workers=N``: N worker processes on this machine sharing one grid (:mod:`poslab.study.grid`).

Each worker is the same command with ``worker=I/N``: one per visible GPU (``CUDA_VISIBLE_DEVICES`` set to
its own), or on a CPU an equal share of the cores (``OMP_NUM_THREADS``), since small runs scale better as
independent processes than as threads of one. A signal to this process goes to every worker, and each
stops as a single run does (a checkpoint, the resume line); the same command continues the grid.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence

from poslab import interrupts
from poslab.errors import RunInterrupted


def devices() -> list[str]:
    """The GPUs the workers share out: ``CUDA_VISIBLE_DEVICES``' entries, else every GPU torch sees."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [d for d in listed.split(",") if d.strip()]
    if not os.path.exists("/proc/driver/nvidia"):  # no NVIDIA driver: no GPU, and no torch import to learn it
        return []
    import torch  # deferred: torch, ~2.3 s

    return [str(i) for i in range(torch.cuda.device_count())]


def worker_environment(index: int, count: int, gpus: list[str]) -> dict[str, str]:
    """Worker ``index``'s environment: its GPU (round robin), or its share of the CPU threads."""
    env = dict(os.environ)
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = gpus[index % len(gpus)]
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // count)))
    return env


def run_workers(arguments: Sequence[str], count: int) -> int:
    """Start ``count`` workers of ``poslab compare <arguments>`` and wait for them: 0 when every one
    succeeded, else the first failure's exit status (128 + signal when interrupted)."""
    gpus = devices()
    command = [sys.executable, "-m", "poslab.cli", "compare", *arguments]
    print(f"{count} workers on {'GPUs ' + ', '.join(gpus) if gpus else 'the CPU'}; one grid, one report", flush=True)
    children = [
        subprocess.Popen([*command, f"worker={i}/{count}"], env=worker_environment(i, count, gpus))
        for i in range(count)
    ]
    received: list[int] = []

    def forward(signum: int, frame: object) -> None:
        received.append(signum)
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in interrupts.SIGNALS}
    try:
        codes = [child.wait() for child in children]
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if received:
        raise RunInterrupted(
            f"interrupted by {signal.Signals(received[0]).name}; each worker saved its run: rerun the same "
            "`poslab compare` command to continue the grid",
            received[0],
        )
    return next((code for code in codes if code != 0), 0)
