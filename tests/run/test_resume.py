"""Interrupted runs: SIGTERM ends with 143 and a checkpoint; ``resume=`` continues to the same result."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from poslab.cli import main
from poslab.config.composition import compose
from poslab.errors import ConfigError, RunInterrupted
from poslab.run.callbacks import History, StepTimer, TrainingPosition
from poslab.run.resume import resumed_config
from poslab.run.train import train
from poslab.track.wandb_offline import records

STEPS = ["trainer.max_epochs=3", "trainer.limit_train_batches=3", "model.dropout=0.1", "data.augment.enabled=true"]


def sigterm_at(monkeypatch, step: int, encoder: str | None = None) -> None:
    """Send this process SIGTERM when training (of ``encoder``'s run, or any) reaches ``step``, as a scheduler does."""
    original = StepTimer.on_train_batch_end

    def hook(self, trainer, pl_module, outputs, batch, batch_idx):
        original(self, trainer, pl_module, outputs, batch, batch_idx)
        if trainer.global_step == step and encoder in (None, pl_module.encoder.name):
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(StepTimer, "on_train_batch_end", hook)


def interrupted_and_resumed(overrides: list[str], monkeypatch, step: int):
    """(uninterrupted summary, resumed summary, run dir): the same seed, one run cut by SIGTERM at ``step``."""
    whole = train(compose([*overrides, "run.name=whole"]))
    cut = [*overrides, "run.name=cut"]
    sigterm_at(monkeypatch, step)
    with pytest.raises(RunInterrupted, match=f"interrupted by SIGTERM at step {step}.*resume=") as caught:
        train(compose(cut))
    assert caught.value.exit_code == 143
    monkeypatch.undo()
    run_dir = Path(whole["run_dir"]).parent / "cut"
    assert (run_dir / "checkpoints" / "last.ckpt").is_file() and not (run_dir / "summary.json").exists()
    again = [*cut, f"resume={run_dir}"]
    return whole, train(resumed_config(compose(again), again)), run_dir


@pytest.mark.parametrize("step", [4, 3], ids=["mid-epoch", "epoch-end"])
def test_sigterm_then_resume_ends_like_an_uninterrupted_run(tiny, monkeypatch, step):
    """Vision, 3 epochs of 3 batches, with dropout and augmentation: cut by SIGTERM (exit 143, last.ckpt) in the
    middle or at the end of an epoch, the resumed run trains the same batches with the same random draws into
    the same directory, continues the loss history, and ends with the uninterrupted run's test metrics.
    (An epoch aggregate of a training metric, train/acc, covers only the batches after the restart.)"""
    whole, resumed, run_dir = interrupted_and_resumed([*tiny, *STEPS], monkeypatch, step)
    assert resumed["run_dir"] == str(run_dir)
    assert resumed["checkpoints"]["last"] == "checkpoints/last.ckpt"
    for curve in ("train/loss", "val/loss", "val/acc"):  # the curves from before the kill go on past it
        assert resumed["history"][curve] == whole["history"][curve]
    assert resumed["metrics"]["test/loss"] == whole["metrics"]["test/loss"]
    assert resumed["metrics"]["test/acc"] == whole["metrics"]["test/acc"]


def test_resumed_text_run_with_randomized_positions_ends_like_an_uninterrupted_one(tiny_text, monkeypatch):
    """Text: an endless window stream, randomized positions drawn from the global RNG, and the modality named
    again on the resume command line."""
    overrides = [*tiny_text, "trainer.max_steps=8", "trainer.val_check_interval=4", "data.random_positions=64"]
    overrides += ["eval.multiples=[1]"]
    whole, resumed, _ = interrupted_and_resumed(overrides, monkeypatch, 3)
    assert resumed["metrics"]["test/loss"] == whole["metrics"]["test/loss"]


def test_resume_last_finds_the_newest_unfinished_run_and_refuses_a_changed_config(tiny, monkeypatch):
    overrides = [*tiny, *STEPS, "run.name=cut"]
    sigterm_at(monkeypatch, 2)
    with pytest.raises(RunInterrupted):
        train(compose(overrides))
    monkeypatch.undo()
    cfg = resumed_config(compose([*tiny, "resume=last"]), [*tiny, "resume=last"])
    assert Path(cfg.resume).name == "cut" and cfg.run.name == "cut"
    longer = [*tiny, "resume=last", "trainer.max_epochs=5"]
    assert resumed_config(compose(longer), longer).trainer.max_epochs == 5  # how long it trains may change
    changed = [*tiny, "resume=last", "model.dim=64", "optim.lr=0.1"]
    with pytest.raises(ConfigError, match=r"differs from the run's in model.dim \(32 -> 64\), optim.lr"):
        resumed_config(compose(changed), changed)
    many = [f"{key}={value}" for key, value in (("model.dim", 64), ("model.depth", 3), ("model.num_heads", 4),
            ("model.mlp_ratio", 3.0), ("model.dropout", 0.2), ("optim.lr", 0.1), ("optim.weight_decay", 0.1),
            ("optim.warmup_fraction", 0.2), ("data.patch_size", 4), ("seed", 7))]  # fmt: skip
    with pytest.raises(ConfigError, match=r"data.patch_size \(7 -> 4\).* and 2 more; a resumed run may change"):
        resumed_config(compose([*tiny, "resume=last", *many]), [*tiny, "resume=last", *many])


def cut_at_step_2(tiny, monkeypatch) -> tuple[list[str], Path]:
    """(overrides, run dir) of a vision run interrupted by SIGTERM at step 2."""
    overrides = [*tiny, *STEPS, "run.name=cut"]
    sigterm_at(monkeypatch, 2)
    with pytest.raises(RunInterrupted):
        train(compose(overrides))
    monkeypatch.undo()
    return overrides, Path(next(o for o in tiny if o.startswith("run.root=")).split("=", 1)[1]) / "vision" / "cut"


def test_resume_refuses_a_checkpoint_changed_since_it_was_saved(tiny, monkeypatch, capsys):
    overrides, run_dir = cut_at_step_2(tiny, monkeypatch)
    last = run_dir / "checkpoints" / "last.ckpt"
    data = bytearray(last.read_bytes())
    data[-100] ^= 0xFF
    last.write_bytes(bytes(data))
    assert main(["train", *overrides, f"resume={run_dir}"]) == 2
    err = capsys.readouterr().err
    assert "does not match the SHA-256 recorded when it was saved" in err and err.count("\n") == 1


@pytest.mark.parametrize("killed_before", ["replace", "digest", "cleanup", "nothing"])
def test_a_kill_anywhere_in_a_save_leaves_a_checkpoint_that_verifies(tmp_path, monkeypatch, killed_before):
    """A save writes the new digest as pending, replaces the checkpoint, then the digest file. Killed before any
    of these steps, the checkpoint on disk (old or new) matches a digest on disk; a change made by anything
    else still reads as corruption, pending digest or not."""
    import poslab.files
    from poslab.errors import DataError
    from poslab.run.checkpoints import PENDING_SUFFIX, recorded_digest, save_with_digest, verify_digest

    last = tmp_path / "last.ckpt"
    save_with_digest(last, b"step 1")
    steps = {"replace": 2, "digest": 3, "cleanup": 4, "nothing": None}  # the atomic writes and unlink, in order
    calls, write, unlink = [], poslab.files.write_atomic, Path.unlink

    class Killed(BaseException):
        pass

    def step(*args):
        calls.append(args)
        if len(calls) == steps[killed_before]:
            raise Killed

    monkeypatch.setattr(poslab.files, "write_atomic", lambda path, data: (step(path), write(path, data)))
    monkeypatch.setattr(Path, "unlink", lambda self, **kw: (step(self), unlink(self, **kw)))
    try:
        save_with_digest(last, b"step 2")
    except Killed:
        pass
    monkeypatch.undo()
    verify_digest(last)
    assert last.read_bytes() == (b"step 1" if killed_before == "replace" else b"step 2")
    if killed_before == "nothing":
        assert not last.with_name(last.name + PENDING_SUFFIX).exists() and recorded_digest(last)
    last.write_bytes(b"step 2, one byte changed")
    with pytest.raises(DataError, match="does not match the SHA-256 recorded"):
        verify_digest(last)


def test_a_run_killed_between_a_checkpoint_and_its_digest_resumes(tiny, monkeypatch, capsys):
    """The same through training: from the second save on, every save dies after replacing the checkpoint and
    before writing its digest file (as if its process had been killed there); the run still resumes."""
    import poslab.files

    calls, write = [], poslab.files.write_atomic

    def dies_before_the_digest(path, data):
        if path.name.endswith(".sha256"):
            calls.append(path)
            if len(calls) > 2:  # the first save of each file (best, last) completes
                raise OSError("killed")
        write(path, data)

    monkeypatch.setattr(poslab.files, "write_atomic", dies_before_the_digest)
    overrides = [*tiny, *STEPS, "run.name=cut"]
    with pytest.raises(OSError, match="killed"):
        train(compose(overrides))
    monkeypatch.undo()
    run_dir = Path(next(o for o in tiny if o.startswith("run.root=")).split("=", 1)[1]) / "vision" / "cut"
    assert (run_dir / "checkpoints" / "last.ckpt.sha256.pending").exists()
    assert main(["train", *overrides, f"resume={run_dir}"]) == 0, capsys.readouterr().err
    assert (run_dir / "summary.json").is_file()


def test_a_resumed_run_continues_its_wandb_run_and_saves_every_tenth_of_the_run_by_default(tiny, monkeypatch):
    """30 steps without run.checkpoint_every_n_steps: last.ckpt at steps 3 and 6, and at the SIGTERM (step 7).
    The resumed run logs into the same offline W&B run (the same id, a second offline directory)."""
    from poslab.run.callbacks import PeriodicLast

    overrides = [o for o in tiny if not o.startswith("logger=")]
    overrides += ["logger=wandb", "logger.mode=offline", *STEPS, "trainer.max_epochs=10", "run.name=cut"]
    saved, save = [], PeriodicLast._save_checkpoint

    def counting(self, trainer, filepath):
        saved.append(trainer.global_step)
        save(self, trainer, filepath)

    sigterm_at(monkeypatch, 7)
    monkeypatch.setattr(PeriodicLast, "_save_checkpoint", counting)
    with pytest.raises(RunInterrupted):
        train(compose(overrides))
    monkeypatch.undo()
    assert saved == [3, 6, 7]
    run_dir = Path(next(o for o in tiny if o.startswith("run.root=")).split("=", 1)[1]) / "vision" / "cut"
    again = [*overrides, f"resume={run_dir}"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        summary = train(resumed_config(compose(again), again))
    # resumed mid-epoch (step 7 of 3-step epochs): the data module restores the position, so Lightning's
    # "dataloader is not resumable" would be untrue here
    assert not [w for w in caught if "not resumable" in str(w.message)]
    offline = sorted((run_dir / "wandb").glob("offline-run-*"))
    # offline-run-<time>-<id>, with "-1" appended when both started within the same second
    assert len(offline) == 2 and len({p.name.split("-")[3] for p in offline}) == 1
    assert summary["wandb"]["dir"] == str(offline[-1]) and summary["history"]["train/loss"]  # the newer one
    assert summary["wandb"]["sync_command"] == f"wandb sync {offline[0]} {offline[1]}"  # both segments, in order
    exits = [[r.exit.exit_code for r in records(next(p.glob("run-*.wandb"))) if r.WhichOneof("record_type") == "exit"]
             for p in offline]  # fmt: skip
    assert exits == [[128 + signal.SIGTERM], [0]]  # W&B shows the interrupted segment as not finished


def test_the_cuda_rng_state_is_this_process_devices_only(monkeypatch):
    """Each DDP rank draws on its own device; rank 0 saves the state of its own device, and every rank restores
    it onto its own (the others in rank 0's process were never advanced). Checked with a stand-in for CUDA."""

    own, restored = torch.tensor([7], dtype=torch.uint8), []

    def every_device(*_args):
        raise AssertionError("every device's state: the wrong one for all ranks but rank 0")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device="cuda": own)
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device="cuda": restored.append(state))
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", every_device)
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", every_device)
    state = TrainingPosition().state_dict()
    assert state["cuda"] is own
    TrainingPosition().load_state_dict(state)
    TrainingPosition().load_state_dict({"cpu": state["cpu"], "cuda": [own, torch.tensor([9], dtype=torch.uint8)]})
    assert restored == [own, own]


def test_resume_of_a_directory_without_a_checkpoint_is_one_line(tiny, tmp_path, capsys):
    empty = tmp_path / "runs" / "vision" / "empty"
    empty.mkdir(parents=True)
    assert main(["train", *tiny, f"resume={empty}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "has no checkpoints/last.ckpt" in err
    assert main(["train", *tiny, "resume=last"]) == 2
    assert "no unfinished vision run" in capsys.readouterr().err


@pytest.mark.slow  # a whole comparison or fresh processes: 6-8 s, kept out of the 5-minute tier
def test_compare_stops_at_an_interrupt_and_the_same_command_continues_the_grid(tiny, tmp_path, monkeypatch):
    """SIGTERM inside the second run of a grid: compare stops (143, no later run started, no report); rerun,
    it skips the finished run, continues the cut one from its checkpoint, and ends like an uninterrupted grid."""
    from poslab.study.compare import compare

    grid = [*tiny, *STEPS]
    whole = compare("vision", ["none", "sincos2d"], 1, [*grid, "run.root=" + str(tmp_path / "whole")], tmp_path)
    lines: list[str] = []
    sigterm_at(monkeypatch, 4, encoder="sincos2d")
    with pytest.raises(RunInterrupted, match=r"\[2/2\] sincos2d seed 0: interrupted by SIGTERM at step 4; rerun"):
        compare("vision", ["none", "sincos2d"], 1, grid, tmp_path / "reports", echo=lines.append)
    monkeypatch.undo()
    assert not any(line.startswith("report:") for line in lines)
    again = compare("vision", ["none", "sincos2d"], 1, grid, tmp_path / "reports", echo=lines.append)
    assert [o.status for o in again["outcomes"]] == ["skipped", "resumed"]
    assert any("[2/2] sincos2d seed 0: continuing the interrupted run" in line for line in lines)
    resumed, uninterrupted = again["outcomes"][1], whole["outcomes"][1]
    assert resumed.run_dir.name == uninterrupted.run_dir.name  # same config, same name
    assert resumed.metrics["test/acc"] == uninterrupted.metrics["test/acc"]
    assert resumed.metrics["test/loss"] == uninterrupted.metrics["test/loss"]


@pytest.mark.slow
def test_sigkill_then_resume_gives_the_uninterrupted_metrics(tiny, tmp_path, caplog):
    """A real process killed with SIGKILL after its step-4 checkpoint; the resumed one ends like a whole run."""
    base = [*tiny, "trainer.max_epochs=4", "trainer.limit_train_batches=4", "run.checkpoint_every_n_steps=4"]
    whole = train(compose([*base, "run.name=whole"]))
    run_dir = Path(whole["run_dir"]).parent / "killed"
    slow_steps = [*base, "run.name=killed"]
    process = subprocess.Popen([sys.executable, "-m", "poslab.cli", "train", *slow_steps])
    checkpoint = run_dir / "checkpoints" / "last.ckpt"
    deadline = time.time() + 120
    while not checkpoint.exists() and process.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert process.returncode == -signal.SIGKILL and checkpoint.exists()
    assert main(["train", *slow_steps, f"resume={run_dir}"]) == 0
    assert f"Restored all states from the checkpoint at {checkpoint}" in caplog.text  # not a fresh start
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["metrics"]["test/acc"] == whole["metrics"]["test/acc"]
    assert summary["metrics"]["test/loss"] == pytest.approx(whole["metrics"]["test/loss"], abs=1e-6)


@pytest.mark.parametrize("locks", ["flock", "files"])
def test_a_run_directory_in_use_is_refused_and_a_compare_skips_it(tiny, tmp_path, capsys, monkeypatch, locks):
    """Two processes never train into one directory: the second is refused (one line) and a comparison
    skips that run, saying so; the lock goes with the process that holds it (an OS lock, or on a shared file
    system without one, a lock file)."""
    monkeypatch.setenv("POSLAB_LOCKS", locks)
    from poslab.run.rundir import run_in_use
    from poslab.study.compare import compare, plan
    from tests.conftest import held_by_another_process

    (_, _, cfg), *_ = plan("vision", ["none"], 1, tiny)
    run_dir = Path(cfg.run.root) / "vision" / cfg.run.name
    run_dir.mkdir(parents=True)
    with held_by_another_process(run_dir):
        assert run_in_use(run_dir)
        assert main(["train", *tiny, f"run.name={cfg.run.name}"]) == 2
        assert "is in use by another poslab process (pid " in capsys.readouterr().err
        lines: list[str] = []
        result = compare("vision", ["none"], 1, tiny, tmp_path / "reports", echo=lines.append)
        assert [o.status for o in result["outcomes"]] == ["skipped"] and "in use by another poslab process" in lines[0]
    assert not run_in_use(run_dir)
    again = compare("vision", ["none"], 1, tiny, tmp_path / "reports", echo=lines.append)
    assert [o.status for o in again["outcomes"]] == ["trained"]


def test_a_new_run_into_an_unfinished_runs_directory_is_refused(tiny, monkeypatch, capsys):
    """Its checkpoints would mix with the new ones (best-v1.ckpt): resume it, or remove it."""
    overrides, _ = cut_at_step_2(tiny, monkeypatch)
    assert main(["train", *overrides]) == 2
    err = capsys.readouterr().err
    assert (
        "holds an unfinished run's checkpoints; continue it with poslab train resume=" in err and err.count("\n") == 1
    )


@pytest.mark.slow
@pytest.mark.parametrize("delay", [2.0, 9.0, 14.0])
def test_a_compare_killed_anywhere_then_rerun_ends_complete_and_unmixed(tiny, tmp_path, delay):
    """SIGTERM at some point of a real `poslab compare`: an honest exit code (143, or 0 if it had finished);
    the same command again finishes the grid, each run with one summary and no second-generation checkpoint."""
    grid = ["modality=vision", "encoders=[none,sincos2d]", "seeds=1", *tiny, *STEPS]
    command = [sys.executable, "-m", "poslab.cli", "compare", *grid]  # the report goes to <cwd>/reports
    process = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(delay)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=300)
    # 143: interrupted with its checkpoint saved; -15: killed by the signal before training began (a shell
    # reports 143 too); 0: the grid had finished
    assert process.returncode in (0, 143, -signal.SIGTERM), err[-2000:]
    if process.returncode == 143:
        assert "rerun the same `poslab compare` command" in err
    again = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    runs = Path(next(o for o in tiny if o.startswith("run.root=")).split("=", 1)[1]) / "vision"
    run_dirs = sorted(runs.iterdir())
    assert len(run_dirs) == 2 and all((d / "summary.json").exists() for d in run_dirs)
    assert not [p for d in run_dirs for p in (d / "checkpoints").glob("*-v*.ckpt")]  # never mixed generations


class _BestFirst(L.LightningModule):
    """Its monitored ``val/loss`` grows every epoch, so the best checkpoint is the first epoch's."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)

    def training_step(self, batch, batch_idx):
        loss = self.layer(batch[0]).pow(2).mean()
        self.log("train/loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val/loss", float(self.current_epoch))

    test_step = validation_step  # Lightning's hook, not a test: testing only has to reload the best checkpoint

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_testing_the_best_checkpoint_keeps_the_runs_own_history_and_rng(tmp_path):
    """Lightning restores callbacks' state from whatever checkpoint it reads, the best one that testing
    reloads too: the run's curves must still reach its last epoch, and the global RNG stay where the run
    left it (a resumed fit does restore both: the resume tests above)."""
    data = torch.utils.data.DataLoader(  # its own generator, as poslab's evaluation loaders: none drawn from the global
        torch.utils.data.TensorDataset(torch.randn(8, 2)), batch_size=4, generator=torch.Generator()
    )
    best = ModelCheckpoint(dirpath=tmp_path, monitor="val/loss", mode="min", save_top_k=1)
    history = History()
    trainer = L.Trainer(
        max_epochs=4, callbacks=[best, history, TrainingPosition()], logger=False, enable_progress_bar=False,
        enable_model_summary=False, log_every_n_steps=1, default_root_dir=tmp_path,
    )  # fmt: skip
    module = _BestFirst()
    trainer.fit(module, data, data)
    assert best.best_model_path.endswith("epoch=0-step=2.ckpt")
    torch.manual_seed(123)
    rng = torch.get_rng_state()
    trainer.test(module, data, ckpt_path=best.best_model_path, verbose=False)
    assert [step for step, _ in history.report["history"]["val/loss"]] == [2, 4, 6, 8]
    assert torch.equal(torch.get_rng_state(), rng)
