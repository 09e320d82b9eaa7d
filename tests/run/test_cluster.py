"""Clusters, faked on this machine: SLURM's and torchrun's variables, CPU processes (gloo), a fake scontrol.

Every process of one launch joins one run (directory, summary, W&B run), named from the launch's id before
any directory is made; a requeued SLURM job finds its run and resumes it to the uninterrupted result.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from poslab.config.composition import compose
from poslab.errors import ConfigError, RunInterrupted
from poslab.run import cluster
from poslab.run.callbacks import StepTimer
from poslab.run.rundir import run_name
from poslab.run.train import train

LAUNCH_VARIABLES = ("SLURM_", "TORCHELASTIC_", "RANK", "LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "POSLAB_RUN_NAME")


def slurm_task(job: str, rank: int, tasks: int, **extra: str) -> dict[str, str]:
    """The variables ``srun`` gives task ``rank`` of a ``tasks``-task batch job on one node."""
    return {
        "SLURM_JOB_ID": job, "SLURM_JOB_NAME": "poslab", "SLURM_NTASKS": str(tasks),
        "SLURM_NTASKS_PER_NODE": str(tasks), "SLURM_PROCID": str(rank), "SLURM_LOCALID": str(rank),
        "SLURM_NODEID": "0", "SLURM_NODELIST": "localhost", "SLURM_JOB_NUM_NODES": "1", **extra,
    }  # fmt: skip


@pytest.fixture
def no_launcher(monkeypatch):
    """This process as no launcher started it (CI may run inside one)."""
    for key in list(os.environ):
        if key.startswith(LAUNCH_VARIABLES):
            monkeypatch.delenv(key)
    return monkeypatch


def test_the_launch_is_read_from_the_launchers_variables(no_launcher):
    assert cluster.current() == cluster.Launch("local", None, 0, 1)
    for key, value in slurm_task("4242", 1, 2).items():
        no_launcher.setenv(key, value)
    assert cluster.current() == cluster.Launch("slurm", "4242", 1, 2) and cluster.is_child_rank()
    no_launcher.setenv("SLURM_ARRAY_JOB_ID", "77")
    no_launcher.setenv("SLURM_ARRAY_TASK_ID", "3")
    assert cluster.current().job == "77_3" and cluster.current().tag == "job77_3"  # an array task: its own run
    no_launcher.setenv("SLURM_JOB_NAME", "interactive")  # srun --pty bash: Lightning's SLURMEnvironment skips it
    assert cluster.current().kind == "local"
    no_launcher.setenv("TORCHELASTIC_RUN_ID", "98c5014d-c6c6-45ed-bc56-abb7457ef362")  # --standalone draws one
    no_launcher.setenv("RANK", "0")
    no_launcher.setenv("WORLD_SIZE", "4")
    assert cluster.current() == cluster.Launch("torchrun", "98c5014d-c6c6-45ed-bc56-abb7457ef362", 0, 4)
    assert cluster.current().tag == "torchrun-98c5014d"
    no_launcher.setenv("TORCHELASTIC_RUN_ID", "sweep/a b")  # a --rdzv-id given: kept whole, as a folder name
    assert cluster.current().tag == "torchrun-sweep_a_b"


def test_every_rank_of_a_job_derives_the_same_run_name_and_another_job_another(no_launcher):
    cfg = compose(["run.name=null"])
    names = []
    for job, rank in (("4242", 0), ("4242", 1), ("4243", 0)):
        for key, value in slurm_task(job, rank, 2).items():
            no_launcher.setenv(key, value)
        names.append(run_name(cfg, "abcdef123"))
    assert names[0] == names[1] == f"{cfg.encoder.name}-s0-abcdef-job4242" and names[2].endswith("job4243")


def test_a_launch_whose_process_count_disagrees_with_the_trainer_is_one_line(no_launcher, tmp_path):
    for key, value in slurm_task("4242", 0, 4).items():
        no_launcher.setenv(key, value)
    with pytest.raises(
        ConfigError, match=r"^slurm started 4 processes, but trainer.num_nodes=1 x trainer.devices=2 = 2"
    ):
        cluster.check_world(1, 2)
    cluster.check_world(1, 4)
    cluster.check_world(1, -1)  # every visible GPU: Lightning counts them
    no_launcher.setenv("SLURM_JOB_NUM_NODES", "2")  # the 4 tasks on 2 nodes
    cluster.check_world(2, 2)
    with pytest.raises(ConfigError, match=r"^slurm started 4 processes on 2 nodes, but trainer.num_nodes=1: set "):
        cluster.check_world(1, -1)  # trainer=ddp (devices -1) with num_nodes left at 1
    cluster.check_world(2, -1)
    no_launcher.setenv("TORCHELASTIC_RUN_ID", "none")
    no_launcher.setenv("WORLD_SIZE", "4")
    with pytest.raises(ConfigError, match="pass --rdzv-id"):
        cluster.check_world(2, 2)
    from poslab.cli import main

    no_launcher.setenv("TORCHELASTIC_RUN_ID", "abc")
    assert main(["train", f"run.root={tmp_path}", "trainer.devices=3"]) == 2
    assert not list(tmp_path.iterdir())  # refused before anything is written
    no_launcher.setenv("LOCAL_WORLD_SIZE", "2")  # torchrun --nnodes 2 --nproc-per-node 2
    with pytest.raises(ConfigError, match=r"^torchrun started 4 processes on 2 nodes, but trainer.num_nodes=1"):
        cluster.check_world(1, "auto")
    cluster.check_world(2, "auto")


def fake_scontrol(folder: Path, exit_code: int = 0) -> Path:
    """An ``scontrol`` that records its arguments (and fails with ``exit_code`` when asked to)."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "scontrol"
    log = folder / "calls.txt"
    script.write_text(f'#!/bin/sh\necho "$@" >> {log}\necho "scontrol said no" >&2\nexit {exit_code}\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return log


def test_requeue_calls_scontrol_and_says_what_happened(tmp_path, monkeypatch):
    log = fake_scontrol(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    assert cluster.requeue("4242") == "requeued SLURM job 4242: it resumes this run when it starts again"
    assert log.read_text() == "requeue 4242\n"
    fake_scontrol(tmp_path / "bin", exit_code=1)
    assert cluster.requeue("4242").startswith("scontrol requeue 4242 failed (scontrol said no)")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert cluster.requeue("4242").startswith("scontrol is not on PATH")


def signal_at(monkeypatch, step: int, signum: int) -> None:
    original = StepTimer.on_train_batch_end

    def hook(self, trainer, pl_module, outputs, batch, batch_idx):
        original(self, trainer, pl_module, outputs, batch, batch_idx)
        if trainer.global_step == step:
            os.kill(os.getpid(), signum)

    monkeypatch.setattr(StepTimer, "on_train_batch_end", hook)


STEPS = ["trainer.max_epochs=3", "trainer.limit_train_batches=3", "model.dropout=0.1", "data.augment.enabled=true"]


def test_a_preempted_slurm_job_checkpoints_requeues_and_resumes_to_the_uninterrupted_result(
    tiny, tmp_path, no_launcher
):
    """``#SBATCH --signal=USR1@90``: SIGUSR1 mid-epoch saves last.ckpt, calls ``scontrol requeue <job>`` and
    exits 138; the job, started again with the same id, resumes its run (same directory, same W&B id) and
    ends with the test metrics of the same run never interrupted."""
    whole = train(compose([*tiny, *STEPS, "run.name=whole"]))
    log = fake_scontrol(tmp_path / "bin")
    no_launcher.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    for key, value in slurm_task("4242", 0, 1).items():
        no_launcher.setenv(key, value)
    signal_at(no_launcher, 4, signal.SIGUSR1)
    with pytest.raises(
        RunInterrupted, match="interrupted by SIGUSR1 at step 4; checkpoint saved; requeued SLURM job 4242"
    ):
        train(compose([*tiny, *STEPS]))
    assert log.read_text() == "requeue 4242\n"
    (run_dir,) = [p for p in (tmp_path / "runs" / "vision").iterdir() if p.name.endswith("job4242")]
    record = json.loads((run_dir / "run.json").read_text())
    assert (run_dir / "checkpoints" / "last.ckpt").is_file() and not (run_dir / "summary.json").exists()

    no_launcher.undo()  # the requeued job: the same variables, a restart count, no signal
    for key in list(os.environ):
        if key.startswith(LAUNCH_VARIABLES):
            no_launcher.delenv(key)
    for key, value in slurm_task("4242", 0, 1, SLURM_RESTART_COUNT="1").items():
        no_launcher.setenv(key, value)
    resumed = train(compose([*tiny, *STEPS]))
    assert resumed["run_dir"] == str(run_dir) and json.loads((run_dir / "run.json").read_text()) == record
    assert resumed["history"]["train/loss"] == whole["history"]["train/loss"]
    assert resumed["metrics"]["test/loss"] == whole["metrics"]["test/loss"]
    assert resumed["metrics"]["test/acc"] == whole["metrics"]["test/acc"]


@pytest.mark.slow
def test_a_real_slurm_job_sent_sigusr1_exits_138_requeues_and_its_relaunch_resumes_the_same_wandb_run(tiny, tmp_path):
    """The whole path as SLURM drives it: a process of job 4343 is sent SIGUSR1 from outside; it saves,
    calls scontrol, exits 138; the relaunched job (same id) resumes the same run directory and W&B run and
    ends with the metrics of a run never interrupted."""
    logged = [*[o for o in tiny if not o.startswith("logger=")], "logger=wandb", "logger.mode=offline", *STEPS,
              "run.checkpoint_every_n_steps=2"]  # fmt: skip
    whole = train(compose([*logged, "run.name=whole"]))
    log = fake_scontrol(tmp_path / "bin")
    job = _environment({**slurm_task("4343", 0, 1), "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"})
    command = [sys.executable, "-m", "poslab", "train", *logged]
    process = subprocess.Popen(command, env=job, stderr=subprocess.PIPE, text=True)
    runs = tmp_path / "runs" / "vision"
    deadline = time.time() + 120
    while not list(runs.glob("*job4343/checkpoints/last.ckpt")) and process.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    process.send_signal(signal.SIGUSR1)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 138, err
    assert "checkpoint saved; requeued SLURM job 4343: it resumes this run when it starts again" in err
    assert log.read_text() == "requeue 4343\n"
    (run_dir,) = runs.glob("*job4343")
    wandb_id = json.loads((run_dir / "run.json").read_text())["wandb_id"]
    relaunched = subprocess.run(command, env={**job, "SLURM_RESTART_COUNT": "1"}, capture_output=True, text=True,
                                timeout=300)  # fmt: skip
    assert relaunched.returncode == 0, relaunched.stderr[-2000:]
    assert f"resuming {run_dir}" in relaunched.stdout
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["metrics"]["test/acc"] == whole["metrics"]["test/acc"]
    assert summary["metrics"]["test/loss"] == pytest.approx(whole["metrics"]["test/loss"], abs=1e-6)
    offline = sorted(p.name for p in run_dir.rglob("offline-run-*") if p.is_dir())
    assert len(offline) == 2 and all(name.endswith(f"-{wandb_id}") for name in offline)  # one W&B run, resumed


def _environment(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCH_VARIABLES)}
    return {**env, "OMP_NUM_THREADS": "1", **extra}


TWO_RANKS = ["trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2", "trainer.precision=32-true"]


def _all_succeed(launches: list[tuple[list[str], dict[str, str]]]) -> list[str]:
    """Start every ``(command, environment)`` at once (the processes of one launch); each must exit 0."""
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    started = [subprocess.Popen(command, env=env, **pipes) for command, env in launches]
    outputs = []
    for process in started:
        out, err = process.communicate(timeout=600)
        assert process.returncode == 0, err[-3000:]
        outputs.append(out)
    return outputs


def _one_run(runs: Path, outputs: list[str]) -> Path:
    """The launch made one run: one directory, one summary, one W&B run, one report printed."""
    (run_dir,) = list((runs / "vision").iterdir())
    assert (run_dir / "summary.json").is_file() and len(list(run_dir.glob("wandb/offline-run-*"))) == 1
    assert sum(out.count("run directory:") for out in outputs) == 1
    return run_dir


@pytest.mark.slow
def test_the_two_tasks_of_a_slurm_job_make_one_run(tiny, tmp_path):
    """Two processes as ``srun`` starts them (SLURM_PROCID 0 and 1), ranks assigned by Lightning's
    SLURMEnvironment, gloo between them."""
    runs = tmp_path / "runs"
    argv = [o for o in tiny if not o.startswith(("logger=", "run.root="))]
    argv += [*TWO_RANKS, "logger=wandb", "logger.mode=offline", f"run.root={runs}"]
    job = str(20000 + os.getpid() % 9000)  # Lightning derives the rendezvous port from the job id
    command = [sys.executable, "-m", "poslab.cli", "train", *argv]
    outputs = _all_succeed([(command, _environment(slurm_task(job, rank, 2))) for rank in (0, 1)])
    run_dir = _one_run(runs, outputs)
    assert run_dir.name.endswith(f"-job{job}")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["config"]["trainer"]["devices"] == 2


@pytest.mark.slow
def test_torchrun_with_two_processes_makes_one_run(tiny, tmp_path):
    runs = tmp_path / "runs"
    argv = [o for o in tiny if not o.startswith(("logger=", "run.root="))]
    argv += [*TWO_RANKS, "logger=wandb", "logger.mode=offline", f"run.root={runs}"]
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "poslab"]
    done = subprocess.run([*command, "train", *argv], env=_environment({}), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = _one_run(runs, [done.stdout])
    assert "-torchrun-" in run_dir.name


@pytest.mark.slow
def test_torchrun_on_two_nodes_makes_one_run(tiny, tmp_path):
    """Two torchrun agents as two nodes would start them (one process each, a c10d rendezvous with a shared
    --rdzv-id): one run directory, one summary, one W&B run; trainer.num_nodes=2 x trainer.devices=1."""
    import socket

    runs = tmp_path / "runs"
    argv = [o for o in tiny if not o.startswith(("logger=", "run.root="))]
    argv += ["trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=1", "trainer.num_nodes=2",
             "trainer.precision=32-true", "logger=wandb", "logger.mode=offline", f"run.root={runs}"]  # fmt: skip
    with socket.socket() as free:
        free.bind(("localhost", 0))
        port = free.getsockname()[1]
    rendezvous = ["--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
                  "--rdzv-endpoint", f"localhost:{port}", "--rdzv-id", "poslab-two-nodes"]  # fmt: skip
    command = [sys.executable, "-m", "torch.distributed.run", *rendezvous, "-m", "poslab", "train", *argv]
    run_dir = _one_run(runs, _all_succeed([(command, _environment({}))] * 2))
    assert run_dir.name.endswith("-torchrun-poslab-two-nodes")  # the shared --rdzv-id names it
