"""Faults a flaky machine or a hostile user brings: moved run directories, checkpoints without digests,
corrupt run files, a longer schedule on resume, two comparisons on one root, W&B unreachable."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from poslab.cli import main
from poslab.config import compose
from poslab.errors import DataError
from poslab.resume import resumed_config
from poslab.rundir import DIGEST_SUFFIX, verify_digest
from poslab.train import train
from tests.test_resume import STEPS, cut_at_step_2


def resume(overrides: list[str], run_dir: Path):
    again = [*overrides, f"resume={run_dir}"]
    return train(resumed_config(compose(again), again))


def test_a_copied_run_directory_resumes_into_its_own_files_and_keeps_the_best(tiny, monkeypatch, tmp_path):
    """`cp -a` of an interrupted run to another root: the copy resumes from its own last.ckpt, replaces it
    (no last-v1.ckpt / best-v1.ckpt), keeps the best score it had, and ends like an uninterrupted run."""
    whole = train(compose([*tiny, *STEPS, "run.name=whole"]))
    overrides, run_dir = cut_at_step_2(tiny, monkeypatch)
    copy = tmp_path / "elsewhere" / "vision" / "cut"
    shutil.copytree(run_dir, copy, symlinks=True)
    shutil.rmtree(run_dir)  # moved: the old place is gone
    resumed = resume(overrides, copy)
    assert resumed["run_dir"] == str(copy)
    names = sorted(p.name for p in (copy / "checkpoints").glob("*.ckpt"))
    assert names == ["best.ckpt", "last.ckpt"]
    assert resumed["metrics"]["test/acc"] == whole["metrics"]["test/acc"]
    assert resumed["metrics"]["val/acc_best"] == whole["metrics"]["val/acc_best"]


@pytest.fixture
def finished(tiny) -> Path:
    """The best checkpoint of a finished tiny run."""
    summary = train(compose(tiny))
    return Path(summary["run_dir"]) / summary["checkpoints"]["best"]


@pytest.mark.parametrize("sidecar", ["missing", "empty", "a directory"])
def test_a_checkpoint_without_a_digest_is_verified_by_loading_it(finished, sidecar):
    digest = finished.with_name(finished.name + DIGEST_SUFFIX)
    digest.unlink()
    if sidecar == "empty":
        digest.write_text("")
    elif sidecar == "a directory":
        digest.mkdir()
    verify_digest(finished)  # intact: it loads and every tensor is finite
    checkpoint = torch.load(finished, weights_only=False)
    name = next(k for k, v in checkpoint["state_dict"].items() if v.is_floating_point())
    checkpoint["state_dict"][name].view(-1)[0] = float("nan")
    torch.save(checkpoint, finished)
    with pytest.raises(DataError, match=f"has no SHA-256 beside it and holds non-finite values in state_dict.{name}"):
        verify_digest(finished)
    finished.write_bytes(finished.read_bytes()[:1000])  # truncated
    with pytest.raises(DataError, match="cannot read checkpoint .*: .*has no SHA-256 beside it to check it by"):
        verify_digest(finished)
    finished.write_bytes(b"")
    with pytest.raises(DataError, match="cannot read checkpoint"):
        verify_digest(finished)


def test_eval_of_a_nan_checkpoint_without_a_digest_is_refused_in_one_line(finished, capsys):
    finished.with_name(finished.name + DIGEST_SUFFIX).unlink()
    checkpoint = torch.load(finished, weights_only=False)
    for value in checkpoint["state_dict"].values():
        if value.is_floating_point():
            value.fill_(float("nan"))
    torch.save(checkpoint, finished)
    assert main(["eval", f"ckpt={finished}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "non-finite values" in err
    assert not (finished.parent.parent / "eval").exists() or not list((finished.parent.parent / "eval").iterdir())


def test_raising_the_length_on_resume_continues_on_the_longer_schedule(tiny, monkeypatch):
    """Documented as allowed: the one-cycle schedule restored as saved would raise at the old total."""
    overrides, run_dir = cut_at_step_2(tiny, monkeypatch)  # 3 epochs x 3 batches, cut at step 2
    longer = [*overrides, "trainer.max_epochs=5"]
    resumed = resume(longer, run_dir)
    last = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)
    assert last["global_step"] == 15
    (schedule,) = last["lr_schedulers"]
    assert schedule["total_steps"] == 15 and schedule["last_epoch"] == 15
    assert resumed["metrics"]["test/acc"] >= 0


@pytest.mark.parametrize(
    ("file", "content", "message"),
    [
        ("config.yaml", "model: [unclosed", "config.yaml is unreadable"),
        ("config.yaml", "- a\n- list\n", "config.yaml is not a poslab run's config"),
        ("run.json", '{"wandb_id": ', "run.json is unreadable (JSONDecodeError); remove it to continue"),
        ("run.json", "[1, 2]", "run.json is not a poslab run record"),
    ],
)
def test_corrupt_run_files_on_resume_are_one_line(tiny, monkeypatch, capsys, file, content, message):
    overrides, run_dir = cut_at_step_2(tiny, monkeypatch)
    (run_dir / file).write_text(content)
    capsys.readouterr()
    assert main(["train", *overrides, f"resume={run_dir}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()  # nothing lost


def test_a_second_compare_skips_the_run_the_first_is_training(tiny, tmp_path):
    """Its directory already holds the first one's best checkpoint: skipped, not a failure with a traceback."""
    from poslab.compare import compare, plan
    from tests.conftest import held_by_another_process

    (_, _, cfg), *_ = plan("vision", ["none"], 1, tiny)
    run_dir = Path(cfg.run.root) / "vision" / cfg.run.name
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "checkpoints" / "best.ckpt").write_bytes(b"being trained")
    with held_by_another_process(run_dir):
        lines: list[str] = []
        result = compare("vision", ["none"], 1, tiny, tmp_path / "reports", echo=lines.append)
        assert [o.status for o in result["outcomes"]] == ["skipped"]
        assert "in use by another poslab process, skipped" in lines[0]


def test_the_report_run_follows_the_runs_offline_when_wandb_is_unreachable(tiny, tmp_path, monkeypatch):
    """Once online W&B failed in the process, the comparison's report run goes offline at once too."""
    import wandb

    import poslab.loggers as loggers
    from poslab.compare import compare

    monkeypatch.setattr(loggers, "_online_failure", "no network")
    modes: list[str] = []
    real = wandb.init

    def init(*args, **kwargs):
        modes.append(kwargs.get("mode"))
        return real(*args, **kwargs)

    monkeypatch.setattr(wandb, "init", init)
    overrides = [o for o in tiny if not o.startswith("logger=")] + ["logger=wandb", "logger.mode=online"]
    lines: list[str] = []
    compare("vision", ["none"], 1, overrides, tmp_path / "reports", echo=lines.append)
    assert modes and set(modes) == {"offline"}
    assert any(line.startswith("W&B ran offline; to upload every run") for line in lines)


def test_checkpoint_state_from_another_directory_is_rebased_not_dropped(tmp_path):
    """What Lightning would drop when the directory differs: the best score and every path, now under the
    new directory; files of the same name are replaced, not versioned."""
    from poslab.callbacks import RunCheckpoint

    old, new = tmp_path / "a" / "checkpoints", tmp_path / "b" / "checkpoints"
    saved = RunCheckpoint(dirpath=old, filename="best", monitor="val/acc", mode="max")
    saved.best_model_score, saved.best_model_path = torch.tensor(0.9), str(old / "best.ckpt")
    saved.kth_best_model_path, saved.kth_value = str(old / "best.ckpt"), torch.tensor(0.9)
    saved.best_k_models, saved.last_model_path = {str(old / "best.ckpt"): torch.tensor(0.9)}, str(old / "last.ckpt")
    moved = RunCheckpoint(dirpath=new, filename="best", monitor="val/acc", mode="max")
    moved.load_state_dict(saved.state_dict())
    assert moved.best_model_score == 0.9 and moved.kth_value == 0.9
    assert moved.best_model_path == moved.kth_best_model_path == str(new / "best.ckpt")
    assert moved.best_k_models == {str(new / "best.ckpt"): 0.9} and moved.last_model_path == str(new / "last.ckpt")
    assert not moved._enable_version_counter


def test_a_full_disk_when_the_summary_is_written_is_one_line_and_leaves_no_summary(tiny, monkeypatch, capsys):
    import errno

    import poslab.rundir as rundir

    real = rundir._write_atomic

    def full(path, data):
        if Path(path).name == "summary.json":
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, data)

    monkeypatch.setattr(rundir, "_write_atomic", full)
    assert main(["train", *tiny, "run.name=full"]) == 2
    err = capsys.readouterr().err
    run_dir = Path(next(o for o in tiny if o.startswith("run.root=")).split("=", 1)[1]) / "vision" / "full"
    assert err == f"poslab: error: cannot write {run_dir / 'summary.json'}: no space left on the device\n"
    assert not (run_dir / "summary.json").exists() and (run_dir / "checkpoints" / "last.ckpt").exists()


def test_a_read_only_run_root_is_one_line(tiny, monkeypatch, capsys, tmp_path):
    """Simulated (root writes into read-only folders): the run directory cannot be made."""
    import errno

    real = Path.mkdir

    def read_only(self, *args, **kwargs):
        if "vision" in self.parts:
            raise OSError(errno.EROFS, "Read-only file system", str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", read_only)
    assert main(["train", *tiny]) == 2
    err = capsys.readouterr().err
    assert err.startswith("poslab: error: cannot write ") and err.endswith(": read-only file system\n")


@pytest.mark.parametrize("key", ["data.root", "run.root"])
def test_a_file_where_a_folder_should_be_is_one_line(tiny, capsys, tmp_path, key):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    assert main(["train", *tiny, f"{key}={blocker}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.endswith("a file stands where a folder should be\n") and str(blocker) in err


def test_a_model_too_large_for_memory_is_one_line_before_anything_is_written(tiny, capsys):
    run_root = Path(next(o for o in tiny if o.startswith("run.root=")).split("=", 1)[1])
    assert main(["train", *tiny, "model.dim=65536"]) == 2  # the largest allowed: 64 GiB for one MLP matrix
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "do not fit in this machine's memory (one allocation asked for" in err
    assert "GiB" in err and not (run_root / "vision").exists()


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("trainer.max_epochs=0", "'trainer.max_epochs' must be >= 1 or -1, got 0"),
        ("trainer.max_steps=0", "'trainer.max_steps' must be >= 1 or -1, got 0"),
        ("data.split_seed=-3", "'data.split_seed' must be in [0, 4,294,967,295], got -3"),
    ],
)
def test_values_that_would_run_wrongly_are_refused(tiny, capsys, override, message):
    assert main(["train", *tiny, override]) == 2
    assert message in capsys.readouterr().err


def test_a_negative_ridge_penalty_is_refused(tiny_ts, capsys):
    assert main(["train", *tiny_ts, "eval.ridge=-0.5"]) == 2
    assert "'eval.ridge' must be >= 0, got -0.5" in capsys.readouterr().err


def test_an_unwritable_wandb_data_folder_stops_the_run_first_with_wandbs_own_line(tiny, monkeypatch, capsys, tmp_path):
    """W&B stages its tables under WANDB_DATA_DIR; unwritable there, it would fail only after training."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("WANDB_DATA_DIR", str(blocker))
    run_root = Path(next(o for o in tiny if o.startswith("run.root=")).split("=", 1)[1])
    assert main(["train", *tiny, "logger=wandb"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("poslab: error: W&B could not start (offline): ")
    assert f"Unable to write staging files to {blocker}" in err and "set WANDB_DATA_DIR" in err
    assert not [p for p in run_root.rglob("*") if p.is_file()]


def test_a_diverged_text_runs_perplexity_stays_a_number(tiny_text):
    """exp(loss) overflows float32 past a loss of 88.7; at optim.lr=3 the validation loss ends above that."""
    import math

    metrics = train(compose([*tiny_text, "optim.lr=3"]))["metrics"]
    assert metrics["val/loss"] > 88.8 and math.isfinite(metrics["val/ppl"])
    assert metrics["val/ppl"] == pytest.approx(math.exp(metrics["val/loss"]), rel=1e-5)
