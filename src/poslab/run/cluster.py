"""Which launch this process belongs to: one process, Lightning's own DDP children, a SLURM job, or torchrun.

Every process of one launch must join one run — one directory, one ``summary.json``, one W&B run — and decide
it before any directory is made. Lightning's DDP launcher re-runs the command in its children with the run
name in :data:`RUN_NAME_ENV`. Ranks that ``srun`` or ``torchrun`` start are started together, so each derives
the same name from what the launcher gives all of them: the SLURM job id (``SLURM_JOB_ID``, or
``<array job>_<task>``), torchrun's run id (``TORCHELASTIC_RUN_ID``, shared by every node of a rendezvous).
A requeued SLURM job and a restarted torchrun keep their id, so they find their run again and resume it.

Ranks come from the launcher's variables, as Lightning's ``SLURMEnvironment`` and
``TorchElasticEnvironment`` read them (Lightning assigns them to the trainer; this module only needs them
before the trainer exists). A leaf: it imports nothing of poslab's but the errors.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from poslab.errors import ConfigError

#: Lightning's DDP children re-run the command; they find the run name here.
RUN_NAME_ENV = "POSLAB_RUN_NAME"
#: Job names SLURM gives an interactive allocation: Lightning's SLURMEnvironment does not manage those.
INTERACTIVE = ("bash", "interactive")


@dataclass(frozen=True)
class Launch:
    """``kind``: ``local`` (one process or Lightning's own children), ``slurm`` or ``torchrun``; ``job``: the
    id every process of the launch shares (None when local)."""

    kind: str
    job: str | None
    rank: int
    world: int
    restarts: int = 0

    @property
    def tag(self) -> str | None:
        """The part of a run name that says which launch made it (``job1234``, ``torchrun-98c5014d``)."""
        if self.kind == "slurm":
            return f"job{self.job}"
        if self.kind == "torchrun":  # a drawn UUID (--standalone) by its first 8 hex digits; a given --rdzv-id whole
            drawn = re.fullmatch(r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", self.job)
            return f"torchrun-{self.job[:8] if drawn else re.sub(r'[^A-Za-z0-9_.-]', '_', self.job)[:40]}"
        return None


def _int(name: str, default: int = 0) -> int:
    try:
        return int(os.environ.get(name, default) or default)
    except ValueError:
        return default


def slurm_job() -> str | None:
    """The id a requeue keeps: ``<array job id>_<task id>`` in an array, else ``SLURM_JOB_ID``."""
    array = os.environ.get("SLURM_ARRAY_JOB_ID")
    if array and os.environ.get("SLURM_ARRAY_TASK_ID"):
        return f"{array}_{os.environ['SLURM_ARRAY_TASK_ID']}"
    return os.environ.get("SLURM_JOB_ID")


def under_slurm() -> bool:
    """A batch job's task, as Lightning's ``SLURMEnvironment.detect()`` decides (not an interactive shell)."""
    return "SLURM_NTASKS" in os.environ and os.environ.get("SLURM_JOB_NAME") not in INTERACTIVE and bool(slurm_job())


def current() -> Launch:
    """This process's launch, from the environment the launcher set."""
    if "TORCHELASTIC_RUN_ID" in os.environ:
        return Launch(
            "torchrun",
            os.environ["TORCHELASTIC_RUN_ID"],
            _int("RANK"),
            _int("WORLD_SIZE", 1),
            _int("TORCHELASTIC_RESTART_COUNT"),
        )
    if under_slurm():
        return Launch("slurm", slurm_job(), _int("SLURM_PROCID"), _int("SLURM_NTASKS", 1), _int("SLURM_RESTART_COUNT"))
    rank = max(_int(k) for k in ("LOCAL_RANK", "NODE_RANK", "RANK"))
    return Launch("local", None, rank, _int("WORLD_SIZE", 1))


def inherited_run_name() -> str | None:
    """The run a Lightning DDP child joins: the name its parent passed it (:func:`children_join`), else None."""
    name = os.environ.get(RUN_NAME_ENV)
    return name if name and "LOCAL_RANK" in os.environ else None


@contextmanager
def children_join(name: str) -> Iterator[None]:
    """While a run trains, the DDP children Lightning starts (re-running the command) join it by ``name``. The
    one value passed to child processes through the environment: they start from the command line alone."""
    os.environ[RUN_NAME_ENV] = name
    try:
        yield
    finally:
        if "LOCAL_RANK" not in os.environ:  # a child keeps it for as long as it lives
            os.environ.pop(RUN_NAME_ENV, None)


def is_child_rank() -> bool:
    """A process other than rank 0 of its launch: it joins the run rank 0 makes (its directory, its lock)."""
    return current().rank > 0


def check_world(num_nodes: int, devices: object) -> None:
    """A launcher's process count against ``trainer.num_nodes × trainer.devices``: Lightning would hang or
    fail deep in its setup when they disagree; here it is one line."""
    launch = current()
    if launch.kind == "local":
        return
    if launch.kind == "torchrun" and launch.job in ("", "none"):
        raise ConfigError(
            "torchrun gave no run id shared by every node (TORCHELASTIC_RUN_ID=none): pass --rdzv-id (or "
            "--standalone on one node), or give every process the same run.name"
        )
    nodes = launch_nodes(launch)
    if nodes is not None and nodes != num_nodes:  # whatever trainer.devices says ("auto", -1: all visible)
        raise ConfigError(
            f"{launch.kind} started {launch.world} processes on {nodes} nodes, but trainer.num_nodes={num_nodes}: "
            f"set trainer.num_nodes={nodes}"
        )
    if not isinstance(devices, int) or isinstance(devices, bool) or devices < 1:
        return  # devices "auto" / -1 (all visible): Lightning counts them
    if num_nodes * devices != launch.world:
        raise ConfigError(
            f"{launch.kind} started {launch.world} processes, but trainer.num_nodes={num_nodes} x "
            f"trainer.devices={devices} = {num_nodes * devices}: set trainer.devices to the processes per node "
            "and trainer.num_nodes to the nodes"
        )


def launch_nodes(launch: Launch) -> int | None:
    """The nodes a launcher started processes on: SLURM's ``SLURM_JOB_NUM_NODES``, torchrun's world size over
    its ``LOCAL_WORLD_SIZE`` (processes per node); None where the launcher does not say."""
    if launch.kind == "slurm":
        return _int("SLURM_JOB_NUM_NODES") or _int("SLURM_NNODES") or None
    local = _int("LOCAL_WORLD_SIZE")
    return launch.world // local if local and launch.world % local == 0 else None


def requeue(job: str) -> str:
    """Put SLURM job ``job`` back in the queue (``scontrol requeue``, as Lightning's auto-requeue does): it
    restarts with the same id and resumes its run. Returns what happened, for the run's last line."""
    scontrol = shutil.which("scontrol")
    if scontrol is None:
        return "scontrol is not on PATH: the job was not requeued; rerun it to resume"
    done = subprocess.run([scontrol, "requeue", job], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        why = (done.stderr or done.stdout).strip().splitlines()[:1]
        return f"scontrol requeue {job} failed ({why[0] if why else f'exit {done.returncode}'}); rerun it to resume"
    return f"requeued SLURM job {job}: it resumes this run when it starts again"
