"""Several processes: ``trainer=ddp trainer.accelerator=cpu trainer.devices=2`` (gloo).

A DDP run is one run: one directory, one ``summary.json``, one W&B run and one
printed report, all from rank 0. Each rank trains on its own shard; evaluation
is sharded too and its metrics reduced across ranks, so the test metrics equal
a one-process evaluation of the same checkpoint when the test set splits
evenly over the ranks (Lightning's ``DistributedSampler`` pads an uneven one
by repeating up to ``devices − 1`` samples). On map-style data they also
equal one process trained on the same batches (batch 2b against two ranks of
b). The extras (length generalisation, baselines, figures) are computed once,
by rank 0.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from poslab.config.composition import compose
from poslab.data import build_datamodule
from poslab.modalities import available_modalities
from poslab.run.train import evaluate
from poslab.track.wandb_offline import read_offline_run
from tests.conftest import tiny_overrides

TWO_CPU_PROCESSES = ["trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2", "trainer.precision=32-true"]
MODALITIES = available_modalities()  # every modality the registry holds: a fork's too
#: Relative tolerance of DDP test metrics against one process: float32 sums taken in another order.
TOLERANCE = 1e-5


def on_rank(datamodule, rank: int, world: int = 2):
    """The data module as DDP rank ``rank`` of ``world`` sees it (what Lightning's trainer tells it)."""
    datamodule.trainer = SimpleNamespace(world_size=world, global_rank=rank)
    return datamodule


@pytest.mark.parametrize("modality", ["vision", "timeseries"])
def test_each_rank_trains_on_its_own_shard(modality, request):
    """Map-style training data: the two ranks' loaders draw disjoint index sets that cover the data."""
    cfg = compose(tiny_overrides(request, modality))
    seen = []
    for rank in (0, 1):
        datamodule = build_datamodule(cfg)
        datamodule.prepare_data()
        datamodule.setup("fit")
        loader = on_rank(datamodule, rank).train_dataloader()
        seen.append(list(loader.sampler))
    size = len(datamodule.train_dataloader().dataset)
    assert not set(seen[0]) & set(seen[1])
    assert set(seen[0]) | set(seen[1]) == set(range(size))


def test_each_rank_draws_its_own_text_windows(tiny_text):
    """The endless text stream is seeded by rank: the ranks' first batches differ, and rank 0's is the run's."""
    cfg = compose(tiny_text)
    first = []
    for rank in (0, 1):
        datamodule = build_datamodule(cfg)
        datamodule.prepare_data()
        datamodule.setup("fit")
        first.append(next(iter(on_rank(datamodule, rank).train_dataloader())))
    alone = build_datamodule(cfg)
    alone.prepare_data()
    alone.setup("fit")
    assert not torch.equal(first[0], first[1])
    assert torch.equal(first[0], next(iter(alone.train_dataloader())))


def _ddp_run(overrides: list[str], tmp_path: Path) -> tuple[subprocess.CompletedProcess, Path]:
    runs = tmp_path / "runs"
    argv = [o for o in overrides if not o.startswith(("logger=", "run.root="))]
    argv += [*TWO_CPU_PROCESSES, "logger=wandb", "logger.mode=offline", f"run.root={runs}"]
    done = subprocess.run(
        [sys.executable, "-m", "poslab.cli", "train", *argv], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done, runs


#: Modalities whose training data is map-style (a shuffled index per epoch): two ranks of batch b train on
#: exactly the samples one process takes in batches of 2b. Text draws its windows per rank (an endless
#: stream), so one process cannot see the same batches.
SAME_BATCHES = ("vision", "timeseries", "video")
#: Relative tolerance of the test metrics of 2 processes against one process trained on the same batches:
#: the gradients agree to float32 rounding (a mean of two half-batch means against one mean), which the
#: optimiser's steps carry into the weights. Measured: at most 2e-7 (vision, time series, video); one
#: process on its own order of the same data: 5e-3 to 1e-1.
TRAINED_TOLERANCE = 1e-4


def one_process_on_the_same_batches(overrides: list[str], monkeypatch, root: Path) -> dict:
    """One process, batch 2b, drawing each epoch's order as DDP's sampler does (``DistributedSampler`` for one
    replica, same seed): its batch k is the union of the two ranks' batches k. The run's own one-process
    order (a seeded ``RandomSampler``, or the global RNG) is another permutation of the same data."""
    from torch.utils.data import DistributedSampler

    from poslab.data.resumable import ResumableLoader, ResumableTraining
    from poslab.run.train import train

    def shuffled_loader(self, dataset, batch_size, seed=None, **kwargs):
        order = DistributedSampler(
            dataset, num_replicas=1, rank=0, seed=getattr(self, "seed", 0) if seed is None else seed
        )
        return self.resumable(ResumableLoader(dataset, batch_size=batch_size, sampler=order, **kwargs))

    monkeypatch.setattr(ResumableTraining, "shuffled_loader", shuffled_loader)
    batch = compose(overrides).data.batch_size
    alone = [o for o in overrides if not o.startswith(("logger=", "run.root="))]
    return train(compose([*alone, f"data.batch_size={2 * batch}", "logger=none", f"run.root={root}"]))


#: What adds each modality's end-of-run probes to its tiny run.
PROBES = {
    "vision": ["eval.image_sizes=[56]"],
    "video": ["eval.frames=[8]", "eval.canvases=[32]"],
    "text": ["eval.rope_scaling=[yarn,longrope]", "eval.search_population=4", "eval.search_generations=1"],
}


@pytest.mark.slow
@pytest.mark.parametrize("modality", list(MODALITIES))
def test_two_cpu_processes_make_one_run_with_the_one_process_metrics(modality, request, tmp_path, monkeypatch):
    overrides = [o for o in tiny_overrides(request, modality) if not o.startswith("trainer.limit_test")]
    if modality == "vision":
        overrides += ["data.test_size=500", "trainer.limit_train_batches=null", "data.batch_size=256"]
        overrides += ["data.augment.enabled=false"]  # random draws per rank: not what one process draws
    if modality == "timeseries":  # 514 test windows: a set that splits evenly (Lightning pads an uneven one)
        overrides += ["data.horizon=25", "model.dropout=0.0", "model.layout=query"]  # + the extrapolation probes
    overrides += PROBES.get(modality, [])
    done, runs = _ddp_run(overrides, tmp_path)
    assert done.stdout.count("run directory:") == 1  # one report, printed by rank 0
    run_dirs = list((runs / modality).iterdir())
    assert len(run_dirs) == 1
    run_dir = run_dirs[0]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert len(list(run_dir.glob("wandb/offline-run-*"))) == 1
    assert summary["wandb"]["sync_command"] and summary["config"]["trainer"]["devices"] == 2

    # each rank its shard: an epoch of a map-style dataset takes half the steps it takes in one process
    steps = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)["global_step"]
    cfg = compose(overrides)
    if modality == "vision":
        datamodule = build_datamodule(cfg)
        datamodule.prepare_data()
        datamodule.setup("fit")
        assert steps == math.ceil(math.ceil(len(datamodule.splits["train"]) / 2) / cfg.data.batch_size)
    elif modality == "text":
        assert steps == cfg.trainer.max_steps

    # the extras ran once, on rank 0, into the summary
    extras = {
        "text": "lengen/",
        "timeseries": "baseline/",
        "vision": "test/acc_per_class",
        "video": "test/acc_per_class",
    }.get(modality, "test/")  # a modality added later: its test metrics at least
    reported = [*summary["metrics"], *summary["tables"], *summary["figures"]]
    assert any(k.startswith(extras) for k in reported), reported

    # test and probe metrics: sharded and reduced across ranks (the probes' shares unpadded) = one process
    # evaluating the same checkpoint
    alone = evaluate(run_dir / summary["checkpoints"]["best"], ["trainer=cpu", "logger=none"])
    tested = [k for k in summary["metrics"] if k in alone["metrics"] and not k.startswith(("train/", "val/", "perf/"))]
    assert any(not k.startswith("test/") for k in tested), tested
    probed = [k for k in tested if not k.startswith("test/")]
    offline = read_offline_run(run_dir)
    for key in probed:
        assert summary["metrics"][key] == pytest.approx(alone["metrics"][key], abs=1e-4), key
        assert offline.logged(key) == [summary["metrics"][key]], key  # logged once, by rank 0
    for key in tested:
        assert summary["metrics"][key] == pytest.approx(alone["metrics"][key], rel=TOLERANCE), key
    if "lengen/searched" in summary["tables"]:  # a searched extension: found, and scored, as by one process
        factors = [row[-1] for row in summary["tables"]["lengen/searched"]["rows"]]
        assert factors == [row[-1] for row in alone["tables"]["lengen/searched"]["rows"]]
        assert any(k.endswith("/longrope") for k in probed), probed

    # and = one process trained on the same batches (map-style data), from its own training run
    if modality in SAME_BATCHES:
        trained = one_process_on_the_same_batches(overrides, monkeypatch, tmp_path / "alone")["metrics"]
        for key in tested:
            assert summary["metrics"][key] == pytest.approx(trained[key], rel=TRAINED_TOLERANCE), key


@pytest.mark.slow
def test_a_killed_two_process_run_resumes_to_the_uninterrupted_metrics(tiny, tmp_path):
    """Both DDP processes SIGKILLed after the step-4 checkpoint; resumed with ``resume=`` under DDP again, the
    run ends with the test metrics of the same run left alone (augmentation on: each rank's random draws
    must continue where they stopped)."""
    base = [o for o in tiny if not o.startswith("trainer.limit_test")]
    base += ["trainer.max_epochs=3", "trainer.limit_train_batches=4", "run.checkpoint_every_n_steps=4"]
    base += ["data.augment.enabled=true", "model.dropout=0.1"]
    whole, runs = _ddp_run([*base, "run.name=whole"], tmp_path)
    expected = json.loads((runs / "vision" / "whole" / "summary.json").read_text())["metrics"]

    argv = [o for o in base if not o.startswith(("logger=", "run.root="))] + ["run.name=killed"]
    argv += [*TWO_CPU_PROCESSES, "logger=none", f"run.root={runs}"]
    process = subprocess.Popen([sys.executable, "-m", "poslab.cli", "train", *argv], start_new_session=True)
    run_dir = runs / "vision" / "killed"
    checkpoint = run_dir / "checkpoints" / "last.ckpt"
    deadline = time.time() + 300
    while not checkpoint.exists() and process.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)  # rank 0 and the rank-1 process it launched
    process.wait()
    assert process.returncode == -signal.SIGKILL and checkpoint.exists()
    assert torch.load(checkpoint, weights_only=False)["global_step"] == 4

    resumed = subprocess.run(
        [sys.executable, "-m", "poslab.cli", "train", *argv, f"resume={run_dir}"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "Restored all states from the checkpoint" in resumed.stdout + resumed.stderr  # not a fresh start
    metrics = json.loads((run_dir / "summary.json").read_text())["metrics"]
    assert metrics["test/acc"] == expected["test/acc"]
    assert metrics["test/loss"] == pytest.approx(expected["test/loss"], rel=TOLERANCE)
