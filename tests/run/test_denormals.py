"""Denormals: the ``poslab`` command flushes them before torch starts its threads."""

from __future__ import annotations

import subprocess
import sys

import pytest

import poslab.cli
import poslab.run.denormals

#: Counts the non-zero results of a multiply that torch's threads share (DAZ reads a denormal input
#: as 0), in a fresh process, after an optional flush and a first parallel operation.
PROBE = """
import sys, torch
torch.set_num_threads(2)
if "flush" in sys.argv:
    from poslab.run.denormals import flush_denormals
    flush_denormals()
torch.ones(1 << 22).mul(2).sum()  # the worker threads start here
print(int(torch.full((1 << 22,), 1e-39).mul(1.0).count_nonzero()))
"""


def probe(*flags: str) -> int:
    done = subprocess.run([sys.executable, "-c", PROBE, *flags], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip())


@pytest.mark.slow  # a whole comparison or fresh processes: 6-8 s, kept out of the 5-minute tier
def test_flushing_first_reaches_every_thread_and_the_default_keeps_denormals():
    import torch

    if not torch.set_flush_denormal(False):  # False is torch's default: this test process keeps it
        pytest.skip("this CPU cannot flush denormals")
    assert probe() == 1 << 22  # torch's default: denormals kept
    assert probe("flush") == 0  # flushed before the threads start: every share is 0


def test_the_poslab_command_flushes_before_the_commands_that_compute(monkeypatch):
    calls = []
    monkeypatch.setattr(poslab.run.denormals, "flush_denormals", lambda: calls.append("flush"))
    monkeypatch.setattr(poslab.cli, "_dispatch", lambda argv: calls.append("main") or 0)
    cases = (
        (["poslab", "train"], ["flush", "main"]),
        (["poslab", "list"], ["main"]),
        (["poslab", "compare", "modality=vision", "workers=1"], ["flush", "main"]),  # it trains itself
        (["poslab", "compare", "modality=vision", "workers=2"], ["main"]),  # it only starts the workers
    )
    for argv, expected in cases:
        calls.clear()
        monkeypatch.setattr(sys, "argv", argv)
        with pytest.raises(SystemExit):
            poslab.cli.run()
        assert calls == expected
