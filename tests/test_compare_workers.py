"""One comparison over several workers: one compare id, every run trained exactly once, one report; a run
whose worker dies is resumed by another."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from poslab.errors import ConfigError
from poslab.grid import SharedGrid, parse_worker

GRID = ["modality=vision", "encoders=[none,sincos2d]", "seeds=2"]


def test_a_worker_is_i_of_n():
    assert parse_worker("0/4") == (0, 4) and parse_worker("3/4") == (3, 4)
    for bad in ("4/4", "-1/2", "1", "a/b", "0/0"):
        with pytest.raises(ConfigError, match=r"must be I/N with 0 <= I < N"):
            parse_worker(bad)


def test_the_workers_of_a_grid_share_its_id_its_failures_and_one_report_claim(tmp_path):
    runs = [tmp_path / "vision" / name for name in ("none-s0-aa", "none-s1-bb")]
    first, second = SharedGrid.of(runs), SharedGrid.of(list(reversed(runs)))
    assert first.state == second.state  # the same grid, whatever order a worker plans it in
    compare_id = first.compare_id()
    assert second.compare_id() == compare_id
    runs[0].mkdir(parents=True)
    first.mark_failed(runs[0], compare_id, "boom")
    assert second.failed(runs[0], compare_id) == "boom" and second.settled(runs[0], compare_id)
    assert second.failed(runs[0], "another-comparison") is None  # a rerun retries it
    assert first.claim_report(compare_id) and not second.claim_report(compare_id)
    first.close(compare_id)
    assert not second.claim_report(compare_id)  # a worker of it finishing after the report: no second report
    assert SharedGrid.of(runs).compare_id() != compare_id  # the next comparison of the grid


def test_an_interrupted_workers_failures_are_retried_and_other_workers_failures_stay(tmp_path):
    """An interrupted comparison keeps its id (the same command continues it): the failures this worker
    recorded are forgotten, so the rerun retries them; those another worker recorded stay settled."""
    import json

    runs = [tmp_path / "vision" / name for name in ("none-s0-aa", "none-s1-bb")]
    grid = SharedGrid.of(runs)
    compare_id = grid.compare_id()
    for run in runs:
        run.mkdir(parents=True)
    grid.mark_failed(runs[0], compare_id, "mine")
    grid.mark_failed(runs[1], compare_id, "theirs")
    theirs = json.loads((runs[1] / ".failed").read_text())
    (runs[1] / ".failed").write_text(json.dumps({**theirs, "pid": theirs["pid"] + 1}))  # another worker's
    grid.forget_own_failures(compare_id)
    assert grid.failed(runs[0], compare_id) is None and grid.failed(runs[1], compare_id) == "theirs"


def _compare(tiny: list[str], *extra: str, root: Path, grid: list[str] = GRID) -> list[str]:
    argv = [o for o in tiny if not o.startswith(("run.root=",))]
    return [sys.executable, "-m", "poslab.cli", "compare", *grid, *argv, f"run.root={root / 'runs'}", *extra]


def _one_report_of_every_run_once(root: Path, outputs: list[str]) -> None:
    summaries = [json.loads(p.read_text()) for p in (root / "runs" / "vision").glob("*/summary.json")]
    assert len(summaries) == 4  # 2 encoders x 2 seeds
    tags = {t for s in summaries for t in s["config"]["logger"]["tags"] if t.startswith("compare:")}
    assert len(tags) == 1  # one compare id
    text = "\n".join(outputs)
    trained = [line for line in text.splitlines() if "ETA" in line and "failed" not in line]
    assert len(trained) == 4, text[-3000:]  # each run trained by exactly one worker
    assert text.count("report: ") == 1 and "another worker writes the report" in text
    assert not list((root / "runs" / ".grids").glob("*.json"))  # the report closed the comparison


def _environment() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1"}


@pytest.mark.slow
def test_two_independent_workers_on_one_grid_train_each_run_once_and_report_once(tiny, tmp_path):
    """``worker=0/2`` and ``worker=1/2``, as two jobs of a SLURM array would run them."""
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True, "env": _environment()}
    workers = [subprocess.Popen(_compare(tiny, f"worker={i}/2", root=tmp_path), cwd=tmp_path, **pipes) for i in (0, 1)]
    outputs = [w.communicate(timeout=600)[0] for w in workers]
    assert [w.returncode for w in workers] == [0, 0], outputs
    _one_report_of_every_run_once(tmp_path, outputs)


@pytest.mark.slow
def test_compare_workers_starts_the_workers_and_waits_for_them(tiny, tmp_path):
    done = subprocess.run(_compare(tiny, "workers=2", root=tmp_path), cwd=tmp_path, capture_output=True, text=True,
                          env=_environment(), timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.startswith("2 workers on the CPU; one grid, one report")
    _one_report_of_every_run_once(tmp_path, [done.stdout])


@pytest.mark.slow
def test_a_run_whose_worker_is_killed_is_resumed_by_another(tiny, tmp_path):
    """Worker 1 of 2 is SIGKILLed after its first run's first checkpoint; worker 0, started afterwards, trains
    its share, finds the dead worker's claim free and resumes that run from its checkpoint."""
    slow = ["trainer.max_epochs=2", "trainer.limit_train_batches=4", "run.checkpoint_every_n_steps=2"]
    command = _compare(tiny, *slow, root=tmp_path, grid=["modality=vision", "encoders=[none,sincos2d]", "seeds=1"])
    doomed = subprocess.Popen([*command, "worker=1/2"], cwd=tmp_path, env=_environment(), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 300
    while not list((tmp_path / "runs" / "vision").glob("*/checkpoints/last.ckpt")) and time.monotonic() < deadline:
        time.sleep(0.2)
    os.killpg(doomed.pid, signal.SIGKILL)
    doomed.wait()
    (killed,) = [p.parents[1] for p in (tmp_path / "runs" / "vision").glob("*/checkpoints/last.ckpt")]
    assert not (killed / "summary.json").exists()
    survivor = subprocess.run([*command, "worker=0/2"], cwd=tmp_path, env=_environment(), capture_output=True,
                              text=True, timeout=600)  # fmt: skip
    assert survivor.returncode == 0, survivor.stdout[-3000:] + survivor.stderr[-3000:]
    assert f"continuing the interrupted run in {killed}" in survivor.stdout
    assert len(list((tmp_path / "runs" / "vision").glob("*/summary.json"))) == 2
    assert survivor.stdout.count("report: ") == 1
