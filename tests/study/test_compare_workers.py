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
from poslab.study.grid import SharedGrid, parse_worker
from tests.conftest import held_by_another_process

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
    with first.reporting(compare_id) as mine:
        assert mine  # the first to ask
    with held_by_another_process(first.report_claim(compare_id)), second.reporting(compare_id) as theirs:
        assert not theirs  # another process holds the claim: it writes the report
    with second.reporting(compare_id) as mine:
        assert mine  # its holder ended (however: kill -9 too) without the report: the claim is free again
        second.reported(compare_id)
    first.close(compare_id)
    with first.reporting(compare_id) as mine:
        assert not mine  # a worker of it finishing after the report: no second report
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


@pytest.mark.slow
def test_two_plain_compares_on_one_root_train_each_run_once_and_one_of_them_reports_all(tiny, tmp_path):
    """Two `poslab compare` commands (no worker=) started together on one grid: each skips what the other is
    training, none fails, and exactly one complete report is written, by whichever finishes the grid."""
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True, "env": _environment()}
    compares = [subprocess.Popen(_compare(tiny, root=tmp_path), cwd=tmp_path, **pipes) for _ in range(2)]
    outputs = [c.communicate(timeout=600)[0] for c in compares]
    assert [c.returncode for c in compares] == [0, 0], outputs
    text = "\n".join(outputs)
    assert "Traceback" not in text
    summaries = list((tmp_path / "runs" / "vision").glob("*/summary.json"))
    assert len(summaries) == 4
    trained = [line for line in text.splitlines() if "ETA" in line and "failed" not in line]
    assert len(trained) == 4, text[-3000:]
    assert text.count("report: ") == 1, text[-3000:]
    (report,) = (tmp_path / "reports").rglob("report.md")
    assert all(
        f"| `{encoder}` | " in report.read_text() and "(n=2)" in report.read_text() for encoder in ("none", "sincos2d")
    )
    assert not list((tmp_path / "runs" / ".grids").glob("*.json"))


#: Worker 1 of a grid, slowed down (1.5 s a step) so that worker 0 finishes its share first and waits for it.
SLOW_WORKER = """
import sys, time
from poslab.run.callbacks import StepTimer
from poslab.cli import main

real = StepTimer.on_train_batch_end
def slow(self, *args, **kwargs):
    time.sleep(1.5)
    return real(self, *args, **kwargs)
StepTimer.on_train_batch_end = slow
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_a_worker_waiting_for_a_run_takes_it_over_when_its_worker_is_killed(tiny, tmp_path):
    """Both workers running: worker 0 has finished its share and waits for worker 1's run; worker 1 is
    SIGKILLed; worker 0, polling, finds the claim free and resumes the run from its checkpoint."""
    slow = ["trainer.max_epochs=4", "trainer.limit_train_batches=4", "run.checkpoint_every_n_steps=2"]
    command = _compare(tiny, *slow, root=tmp_path, grid=["modality=vision", "encoders=[none,sincos2d]", "seeds=1"])
    doomed = subprocess.Popen([sys.executable, "-c", SLOW_WORKER, *command[3:], "worker=1/2"], cwd=tmp_path,
                              env=_environment(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)  # fmt: skip
    runs = tmp_path / "runs" / "vision"
    deadline = time.monotonic() + 300
    while not list(runs.glob("*/checkpoints/last.ckpt")) and time.monotonic() < deadline:
        time.sleep(0.1)
    out = tmp_path / "worker0.out"
    with out.open("w") as sink:
        survivor = subprocess.Popen([*command, "worker=0/2"], cwd=tmp_path, env=_environment(), stdout=sink,
                                    stderr=subprocess.STDOUT, text=True)  # fmt: skip
        while "waiting for 1 run(s)" not in out.read_text() and survivor.poll() is None:
            time.sleep(0.1)
        assert doomed.poll() is None, "worker 1 finished before worker 0 waited for it"
        (killed,) = [
            p.parents[1] for p in runs.glob("*/checkpoints/last.ckpt") if not (p.parents[1] / "summary.json").exists()
        ]
        os.killpg(doomed.pid, signal.SIGKILL)
        doomed.wait()
        survivor.wait(timeout=600)
    text = out.read_text()
    assert survivor.returncode == 0, text[-3000:]
    assert f"continuing the interrupted run in {killed}" in text
    assert len(list(runs.glob("*/summary.json"))) == 2 and text.count("report: ") == 1


def test_each_local_worker_gets_its_own_gpu_round_robin(monkeypatch, capsys):
    """``workers=N`` on a machine with GPUs: worker I sees GPU I mod G only, and torch threads stay as set."""
    import poslab.study.workers as workers

    started: list[tuple[list[str], dict[str, str]]] = []

    class Child:
        def __init__(self, command, env):
            started.append((command, env))

        def wait(self):
            return 0

        def poll(self):
            return 0

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    monkeypatch.setattr(workers.subprocess, "Popen", Child)
    assert workers.run_workers(["modality=vision"], 3) == 0
    assert [env["CUDA_VISIBLE_DEVICES"] for _, env in started] == ["3", "5", "3"]
    assert [command[-1] for command, _ in started] == ["worker=0/3", "worker=1/3", "worker=2/3"]
    assert capsys.readouterr().out.startswith("3 workers on GPUs 3, 5; one grid, one report")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    started.clear()
    workers.run_workers(["modality=vision"], 2)
    assert all("CUDA_VISIBLE_DEVICES" not in env or env["CUDA_VISIBLE_DEVICES"] == "" for _, env in started)
    assert {env["OMP_NUM_THREADS"] for _, env in started} == {str(max(1, (os.cpu_count() or 1) // 2))}


@pytest.mark.parametrize("mode", ["flock", "files"])
def test_a_report_claim_whose_holder_was_killed_is_taken_by_the_next_worker(tmp_path, monkeypatch, mode):
    """A worker killed by SIGKILL while it writes the report: with flock its lock went with it; with lock files
    its ``host pid`` names a process that no longer runs. Either way the same command, run again, reports."""
    import socket

    monkeypatch.setenv("POSLAB_LOCKS", mode)
    runs = [tmp_path / "vision" / name for name in ("none-s0-aa", "none-s1-bb")]
    grid = SharedGrid.of(runs)
    compare_id = grid.compare_id()
    claim = grid.report_claim(compare_id)
    code = ("import sys, time; from pathlib import Path; from poslab.study.grid import SharedGrid\n"
            f"grid = SharedGrid.of([Path(p) for p in {[str(r) for r in runs]!r}])\n"
            f"with grid.reporting({compare_id!r}) as mine:\n    print(mine, flush=True); time.sleep(60)\n")  # fmt: skip
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "POSLAB_LOCKS": mode})  # fmt: skip
    assert holder.stdout.readline().strip() == "True"  # it holds the claim, mid-report
    with grid.reporting(compare_id) as mine:
        assert not mine
    holder.send_signal(signal.SIGKILL)
    holder.wait(30)
    if mode == "files":
        assert (claim / ".lock.held").read_text().split()[:2] == [socket.gethostname(), str(holder.pid)]
    with grid.reporting(compare_id) as mine:
        assert mine
