"""Faults a flaky machine or a hostile user brings: moved run directories, checkpoints without digests,
corrupt run files, a longer schedule on resume, two comparisons on one root, W&B unreachable."""

from __future__ import annotations

import re
import shutil
import signal
from pathlib import Path

import pytest
import torch

from poslab.cli import main
from poslab.config.composition import compose
from poslab.errors import DataError, RunInterrupted
from poslab.run.checkpoints import DIGEST_SUFFIX, verify_digest
from poslab.run.resume import resumed_config
from poslab.run.train import train
from tests.run.test_resume import STEPS, cut_at_step_2


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


def test_eval_of_a_checkpoint_without_a_digest_warns_and_a_finite_but_damaged_one_is_refused(finished, capsys):
    """No digest: the eval says its checkpoint was checked by its values only; a weight whose top exponent bit
    flipped (finite, ~1e37) passes that check, and its non-finite test loss is an error, not a result."""
    finished.with_name(finished.name + DIGEST_SUFFIX).unlink()
    assert main(["eval", f"ckpt={finished}", "run.name=intact"]) == 0
    assert f"poslab: warning: checkpoint {finished} has no SHA-256 beside it" in capsys.readouterr().err
    checkpoint = torch.load(finished, weights_only=False)
    weight = next(v for k, v in checkpoint["state_dict"].items() if v.is_floating_point() and v.ndim == 2)
    weight.view(-1)[: weight.numel() // 2] = 1e37
    torch.save(checkpoint, finished)
    assert main(["eval", f"ckpt={finished}", "run.name=damaged"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"poslab: error: checkpoint {finished} gives test/loss=")
    assert "its weights are damaged" in err[-1] and not (finished.parent.parent / "eval" / "damaged").exists()


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


def test_raising_max_steps_on_resume_continues_on_the_longer_schedule(tiny, monkeypatch):
    from tests.run.test_resume import sigterm_at

    overrides = [*tiny, "trainer.max_epochs=-1", "trainer.max_steps=6", "run.name=steps"]
    sigterm_at(monkeypatch, 2)
    with pytest.raises(RunInterrupted):
        train(compose(overrides))
    monkeypatch.undo()
    run_dir = Path(next(o for o in tiny if o.startswith("run.root=")).split("=", 1)[1]) / "vision" / "steps"
    resume([*overrides, "trainer.max_steps=10"], run_dir)
    last = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)
    (schedule,) = last["lr_schedulers"]
    assert last["global_step"] == 10 and schedule["total_steps"] == 10 and schedule["last_epoch"] == 10


def test_a_resumed_run_verifies_the_best_checkpoint_it_tests(tiny, monkeypatch, capsys):
    """Interrupted while testing, then best.ckpt changed on disk: the resume refuses it in one line."""
    from poslab.tasks.classification import Classifier
    from tests.test_interrupts import signal_in

    overrides = [*tiny, "run.name=tested"]
    signal_in(monkeypatch, Classifier, "test_step", signal.SIGTERM)
    with pytest.raises(RunInterrupted):
        train(compose(overrides))
    monkeypatch.undo()
    run_dir = Path(next(o for o in tiny if o.startswith("run.root=")).split("=", 1)[1]) / "vision" / "tested"
    best = run_dir / "checkpoints" / "best.ckpt"
    data = bytearray(best.read_bytes())
    data[-100] ^= 0xFF
    best.write_bytes(bytes(data))
    capsys.readouterr()
    assert main(["train", *overrides, f"resume={run_dir}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "best.ckpt" in err and "does not match the SHA-256" in err
    assert not (run_dir / "summary.json").exists()


@pytest.mark.parametrize("epochs", [1, 2])  # 1: last.ckpt predates every validation, and so the best
def test_a_run_resumed_after_its_fit_tests_the_best_checkpoint_and_keeps_the_fits_metrics(tiny, monkeypatch, epochs):
    """last.ckpt is saved before the last validation: the resumed run still tests best.ckpt (not the weights
    it loaded) and reports the finished fit's val/* and best score, as the uninterrupted run does."""
    import lightning as L

    from poslab.tasks.classification import Classifier
    from tests.test_interrupts import signal_in

    whole = train(compose([*tiny, f"trainer.max_epochs={epochs}", "run.name=whole"]))
    overrides = [*tiny, f"trainer.max_epochs={epochs}", "run.name=tested"]
    signal_in(monkeypatch, Classifier, "test_step", signal.SIGTERM)
    with pytest.raises(RunInterrupted):
        train(compose(overrides))
    monkeypatch.undo()
    run_dir = Path(whole["run_dir"]).parent / "tested"
    tested, real_test = [], L.Trainer.test

    def spy(self, *args, **kwargs):
        tested.append(kwargs.get("ckpt_path"))
        return real_test(self, *args, **kwargs)

    monkeypatch.setattr(L.Trainer, "test", spy)
    resumed = resume(overrides, run_dir)
    assert tested[0] == str(run_dir / "checkpoints" / "best.ckpt")
    timed = {k: v for k, v in resumed["metrics"].items() if k.startswith("perf/")}  # a clock, not a result
    assert resumed["metrics"] == pytest.approx(whole["metrics"] | timed)


def test_a_copy_beside_its_original_resumes_twice_into_its_own_files(tiny, monkeypatch, tmp_path):
    """`cp -a` with the original left in place: the copy, interrupted again and resumed again, writes only its
    own best.ckpt / last.ckpt; the original is untouched."""
    from tests.run.test_resume import sigterm_at

    whole = train(compose([*tiny, *STEPS, "run.name=whole"]))
    overrides, run_dir = cut_at_step_2(tiny, monkeypatch)
    before = {p.name: p.read_bytes() for p in (run_dir / "checkpoints").iterdir()}
    copy = tmp_path / "elsewhere" / "vision" / "cut"
    shutil.copytree(run_dir, copy, symlinks=True)
    sigterm_at(monkeypatch, 5)
    with pytest.raises(RunInterrupted):
        resume(overrides, copy)
    monkeypatch.undo()
    resumed = resume(overrides, copy)
    assert sorted(p.name for p in (copy / "checkpoints").glob("*.ckpt")) == ["best.ckpt", "last.ckpt"]
    assert resumed["metrics"]["test/acc"] == whole["metrics"]["test/acc"]
    assert {p.name: p.read_bytes() for p in (run_dir / "checkpoints").iterdir()} == before
    assert not (run_dir / "summary.json").exists()


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


@pytest.mark.parametrize("damage", ["truncated", "empty"])
def test_a_damaged_last_checkpoint_without_its_digest_is_one_line_on_resume(tiny, monkeypatch, capsys, damage):
    """No digest to compare with: the checkpoint is loaded to be verified, and a file cut short or emptied
    is refused in one line; the run directory keeps it."""
    overrides, run_dir = cut_at_step_2(tiny, monkeypatch)
    last = run_dir / "checkpoints" / "last.ckpt"
    (run_dir / "checkpoints" / f"last.ckpt{DIGEST_SUFFIX}").unlink()
    data = last.read_bytes()
    last.write_bytes(data[: len(data) // 2] if damage == "truncated" else b"")
    capsys.readouterr()
    assert main(["train", *overrides, f"resume={run_dir}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "last.ckpt" in err and "Traceback" not in err
    assert last.is_file() and not (run_dir / "summary.json").exists()


def test_a_second_compare_skips_the_run_the_first_is_training(tiny, tmp_path):
    """Its directory already holds the first one's best checkpoint: skipped, not a failure with a traceback."""
    from poslab.study.compare import compare, plan
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
        assert result["report"] is None  # the comparison training it reports the whole grid
        assert "in use by another process; the comparison that trains them writes the report" in lines[-1]


def test_the_report_run_follows_the_runs_offline_when_wandb_is_unreachable(tiny, tmp_path, monkeypatch):
    """Once online W&B failed in the process, the comparison's report run goes offline at once too."""
    import wandb

    import poslab.track.loggers as loggers
    from poslab.study.compare import compare

    monkeypatch.setattr(loggers, "_online_failure", "no network")
    modes: list[str] = []
    real = wandb.init

    def init(*args, **kwargs):
        modes.append(kwargs.get("mode"))
        return real(*args, **kwargs)

    monkeypatch.setattr(wandb, "init", init)
    overrides = [o for o in tiny if not o.startswith("logger=")] + ["logger=wandb", "logger.mode=online"]
    lines: list[str] = []
    result = compare("vision", ["none"], 1, overrides, tmp_path / "reports", echo=lines.append)
    assert modes and set(modes) == {"offline"}
    assert any(line.startswith("W&B ran offline; to upload every run") for line in lines)
    assert [o.status for o in result["outcomes"]] == ["trained"] and result["report"] is not None


def test_checkpoint_state_from_another_directory_is_rebased_not_dropped(tmp_path):
    """What Lightning would drop when the directory differs: the best score and every path, now under the
    new directory; files of the same name are replaced, not versioned."""
    from poslab.run.callbacks import RunCheckpoint

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


def fail_writes(monkeypatch, name: str, number: int, nth: int = 1, inside: str = "") -> None:
    """Writes of files called ``name`` (with ``inside`` in their path) fail with errno ``number`` from the
    ``nth`` on, as a full or failing disk makes them."""
    import os

    import poslab.files as files

    real, seen = files.write_atomic, []

    def failing(path, data):
        if Path(path).name == name and inside in str(path):
            seen.append(path)
            if len(seen) >= nth:
                raise OSError(number, os.strerror(number), str(path))
        return real(path, data)

    monkeypatch.setattr(files, "write_atomic", failing)


def test_a_full_disk_when_the_summary_is_written_is_one_line_and_leaves_no_summary(tiny, monkeypatch, capsys):
    import errno

    fail_writes(monkeypatch, "summary.json", errno.ENOSPC)
    assert main(["train", *tiny, "run.name=full"]) == 2
    err = capsys.readouterr().err
    run_dir = Path(next(o for o in tiny if o.startswith("run.root=")).split("=", 1)[1]) / "vision" / "full"
    assert err == (
        f"poslab: error: cannot write {run_dir / 'summary.json'}: no space left on the device; checkpoints/last.ckpt "
        f"is kept: fix the disk, then continue with: poslab train resume={run_dir}\n"
    )
    assert not (run_dir / "summary.json").exists() and (run_dir / "checkpoints" / "last.ckpt").exists()
    monkeypatch.undo()  # the disk fixed: the line continues the run
    assert main(["train", *tiny, f"resume={run_dir}"]) == 0
    assert (run_dir / "summary.json").exists()


def test_a_full_disk_when_a_checkpoint_is_saved_is_one_line_and_keeps_the_last_good_one(tiny, monkeypatch, capsys):
    """The second save of last.ckpt hits ENOSPC: one line naming it, and the first last.ckpt still verifies."""
    import errno

    fail_writes(monkeypatch, "last.ckpt", errno.ENOSPC, nth=2)
    args = ["train", *tiny, "run.name=full", "trainer.max_epochs=2", "run.checkpoint_every_n_steps=1"]
    assert main(args) == 2
    err = capsys.readouterr().err
    run_dir = Path(next(o for o in tiny if o.startswith("run.root=")).split("=", 1)[1]) / "vision" / "full"
    last = run_dir / "checkpoints" / "last.ckpt"
    assert err.startswith(f"poslab: error: cannot write {last}: no space left on the device; checkpoints/last.ckpt ")
    verify_digest(last)  # the first save, whole
    assert not (run_dir / "summary.json").exists()
    assert not list(last.parent.glob(".*.tmp"))  # no half-written file left behind


def test_a_disk_going_read_only_before_the_first_checkpoint_says_to_run_again(tiny, monkeypatch, capsys):
    import errno

    fail_writes(monkeypatch, "last.ckpt", errno.EROFS)
    assert main(["train", *tiny, "run.name=ro", "run.checkpoint_every_n_steps=1"]) == 2
    err = capsys.readouterr().err
    assert err.endswith("last.ckpt: read-only file system; no checkpoint was saved yet: fix the disk and run the "
                        "same command again\n"), err  # fmt: skip


def test_a_write_that_fails_names_its_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    """``[Errno 28] No space left on device`` from a write names no file; the line names the one meant."""
    import errno
    import os

    import poslab.files as files

    class Full:
        def __init__(self, fd, mode):
            os.close(fd)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files.os, "fdopen", Full)
    with pytest.raises(OSError) as raised:
        files.write_atomic(tmp_path / "summary.json", b"{}")
    assert (raised.value.errno, raised.value.filename) == (errno.ENOSPC, str(tmp_path / "summary.json"))
    assert not list(tmp_path.iterdir())


def test_a_file_too_large_for_its_limit_is_one_line_naming_it(tmp_path):
    """A real EFBIG: the process's file-size limit (RLIMIT_FSIZE) below what is written."""
    import subprocess
    import sys

    code = (
        "import resource, signal, sys\n"
        "from pathlib import Path\n"
        "from poslab.errors import os_error_line\n"
        "from poslab.files import write_atomic\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))\n"
        "try:\n"
        "    write_atomic(Path(sys.argv[1]), b'x' * 100_000)\n"
        "except OSError as exc:\n"
        "    print(os_error_line(exc))\n"
    )
    target = tmp_path / "big.ckpt"
    done = subprocess.run([sys.executable, "-c", code, str(target)], capture_output=True, text=True, timeout=60)
    assert done.stdout == f"cannot write {target}: the file is larger than this file system allows\n", done.stderr
    assert not list(tmp_path.iterdir())


def test_an_os_error_of_any_kind_is_one_line_with_the_path_and_the_systems_words(tiny, monkeypatch, capsys):
    import errno

    fail_writes(monkeypatch, "summary.json", errno.EIO)
    assert main(["train", *tiny, "run.name=eio"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("poslab: error: cannot use ") and err.endswith("summary.json: input/output error\n")


def test_a_compare_run_that_meets_a_fault_is_one_line_not_a_traceback(tiny, tmp_path, monkeypatch, capsys):
    """A faulty run in a grid is reported in a line (the others go on); tracebacks are for bugs only."""
    import errno

    from poslab.study.compare import compare

    fail_writes(monkeypatch, "summary.json", errno.ENOSPC, inside="/none-")
    lines: list[str] = []
    result = compare("vision", ["none", "learned2d"], 1, tiny, tmp_path / "reports", echo=lines.append)
    assert [o.status for o in result["outcomes"]] == ["failed", "trained"]
    assert "no space left on the device" in result["outcomes"][0].error
    assert "Traceback" not in capsys.readouterr().err


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


def test_a_model_too_large_for_memory_is_one_line_before_anything_is_allocated(tiny, capsys, monkeypatch):
    """Counted on the meta device: no tensor of the model is made (an allocation would fail, or be granted by
    an overcommitting kernel and killed later)."""
    run_root = Path(next(o for o in tiny if o.startswith("run.root=")).split("=", 1)[1])
    from poslab.modalities.registry import Modality

    real_build = Modality.task_for

    def only_on_meta(*args, **kwargs):
        assert torch.get_default_device().type == "meta", "the model was built in memory"
        return real_build(*args, **kwargs)

    monkeypatch.setattr(Modality, "task_for", only_on_meta)
    assert main(["train", *tiny, "model.dim=65536"]) == 2  # the largest allowed width
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the model does not fit in this machine's memory" in err
    count = int(re.search(r"([\d,]+) parameters", err).group(1).replace(",", ""))
    assert count > 65536**2  # at least one dim x dim matrix
    assert f"{count * 16 / 2**30:.1f} GiB for weights, gradients and optimiser moments" in err
    assert not (run_root / "vision").exists()


def test_the_memory_count_is_the_models_own_and_refuses_what_the_machine_lacks(tiny, capsys, monkeypatch):
    from poslab.data import build_datamodule
    from poslab.run import memory
    from poslab.tasks import build_task

    cfg = compose(tiny)
    datamodule = build_datamodule(cfg)
    datamodule.prepare_data()
    datamodule.setup("fit")
    built = build_task(cfg, datamodule)
    assert memory.counted_parameters(lambda: build_task(cfg, datamodule)) == sum(p.numel() for p in built.parameters())
    needed = sum(p.numel() for p in built.parameters()) * 16
    monkeypatch.setattr(memory, "available_bytes", lambda accelerator: needed - 1)
    run_root = Path(cfg.run.root)
    assert main(["train", *tiny]) == 2
    assert "does not fit in this machine's memory" in capsys.readouterr().err
    assert not (run_root / "vision").exists()
    monkeypatch.setattr(memory, "available_bytes", lambda accelerator: needed)
    assert main(["train", *tiny]) == 0


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("trainer.max_epochs=0", "'trainer.max_epochs' must be >= 1 or -1, got 0"),
        ("trainer.max_steps=0", "'trainer.max_steps' must be >= 1 or -1, got 0"),
        ("data.split_seed=-3", "'data.split_seed' must be in [0, 4,294,967,295], got -3"),
        ("trainer.min_epochs=5 trainer.max_epochs=2", "trainer.min_epochs (5) must not exceed trainer.max_epochs (2)"),
        ("trainer.min_steps=9 trainer.max_steps=3", "trainer.min_steps (9) must not exceed trainer.max_steps (3)"),
        ("optim.name=sgd optim.dampening=-5", "'optim.dampening' must be in [0, 1], got -5.0"),
        ("optim.name=rmsprop optim.centered=true optim.alpha=-3", "'optim.alpha' must be >= 0, got -3.0"),
        ("optim.name=sgd optim.nesterov=true", "optim.name=sgd refuses its options: Nesterov momentum requires"),
        ("optim.name=adamax optim.betas=[0.9,1.5]", "'optim.betas' must be in [0, 1), got 1.5"),
        ("optim.name=radam optim.decoupled_weight_decay=true optim.weight_decay=-1", "'optim.weight_decay'"),
    ],
)
def test_values_that_would_run_wrongly_are_refused(tiny, capsys, override, message):
    run_root = Path(next(o for o in tiny if o.startswith("run.root=")).split("=", 1)[1])
    assert main(["train", *tiny, *override.split()]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not run_root.exists() or not any(run_root.iterdir())


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("encoder.scaling.factor=-2", "'encoder.scaling.factor' must be >= 1, got -2.0"),
        ("encoder.scaling.factor=0.5", "'encoder.scaling.factor' must be >= 1, got 0.5"),
        ("encoder.scaling.beta_fast=0", "'encoder.scaling.beta_fast' must be > 0, got 0"),
        ("encoder.scaling.beta_fast=0.5", "beta_fast (0.5) must be above beta_slow (1)"),
        ("encoder.scaling.high_freq_factor=0.5", "high_freq_factor (0.5) must be above low_freq_factor (1)"),
        ("encoder.scaling.long_factor=[1.0,-1.0]", "'encoder.scaling.long_factor' must be > 0, got -1.0"),
        ("encoder.scaling.attention_factor=0", "'encoder.scaling.attention_factor' must be > 0, got 0"),
        ("encoder.scaling.original_max_len=0", "'encoder.scaling.original_max_len' must be >= 1, got 0"),
    ],
)
def test_rope_scaling_values_that_would_run_wrongly_are_refused(tiny_text, capsys, override, message):
    run_root = Path(next(o for o in tiny_text if o.startswith("run.root=")).split("=", 1)[1])
    args = ["train", *tiny_text, "encoder=rope", "encoder.scaling.type=yarn", "encoder.scaling.factor=2", override]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not run_root.exists() or not any(run_root.iterdir())


def test_a_patch_longer_than_the_lookback_is_one_line(tiny_ts, capsys):
    assert main(["train", *tiny_ts, "model.layout=patch", "model.patch_len=64", "data.lookback=32"]) == 2
    assert "model.patch_len (64) must not exceed data.lookback (32)" in capsys.readouterr().err


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


def test_a_perplexity_past_float64s_range_is_its_largest_value():
    import math

    from poslab.modalities.text.task import perplexity

    assert perplexity(torch.tensor(3.0)).item() == pytest.approx(math.exp(3.0))
    assert perplexity(torch.tensor(346.0)).item() == pytest.approx(math.exp(346.0))
    assert perplexity(torch.tensor(800.0)).item() == torch.finfo(torch.float64).max


def test_the_resume_line_of_a_run_in_a_folder_with_spaces_and_quotes_runs_in_a_shell(tiny, monkeypatch, tmp_path,
                                                                                      capsys):  # fmt: skip
    """The line an interrupted run prints is quoted for the shell: split as a shell splits it, it resumes."""
    import shlex

    from tests.run.test_resume import sigterm_at

    root = tmp_path / "it's a run root"
    overrides = [o if not o.startswith("run.root=") else f"run.root={root}" for o in tiny]
    sigterm_at(monkeypatch, 2)
    assert main(["train", *overrides, *STEPS, "run.name=cut"]) == 128 + signal.SIGTERM
    monkeypatch.undo()
    line = capsys.readouterr().err.strip().splitlines()[-1]
    command = line.split("continue with: ", 1)[1]
    argv = shlex.split(command)
    assert argv[:2] == ["poslab", "train"] and argv[2] == f"resume={root / 'vision' / 'cut'}"
    assert main([*argv[1:], *overrides, *STEPS]) == 0


@pytest.mark.parametrize(("key", "value"), [("run.root", "runs\nmore"), ("run.name", "a\tb")])
def test_a_control_character_in_a_run_path_is_one_line(key, value, tiny, capsys, tmp_path):
    """On the command line (YAML would fold the newline into a space) or from a file of overrides; a config
    group's YAML holding one is refused when the run's keys are checked."""
    from poslab.errors import ConfigError
    from poslab.run.rundir import check_run
    from tests.conftest import assert_refused_in_one_line

    assert_refused_in_one_line(tiny, f"{key}={value}", f"override '{key}' holds a control character", capsys)
    escaped = value.replace("\n", "\\n").replace("\t", "\\t")
    (tmp_path / "bad.yaml").write_text(f'run:\n  {key.split(".")[1]}: "{escaped}"\n')
    assert_refused_in_one_line(tiny, f"--config={tmp_path / 'bad.yaml'}", "holds a control character", capsys)
    with pytest.raises(ConfigError, match=f"^{key} must not hold control characters"):
        check_run({"root": "runs", "name": None, key.split(".")[1]: value})


@pytest.mark.parametrize("choice", ["../trainer/gpu", "..\\trainer\\gpu", "sub/x"])
def test_a_group_choice_is_a_name_never_a_path(choice):
    with pytest.raises(Exception, match=rf"unknown experiment '{re.escape(choice)}'"):
        compose([f"experiment={choice}"])


@pytest.mark.parametrize(("modality", "source"), [("timeseries", "csvfile"), ("text", "textfile")])
@pytest.mark.timeout(60)
def test_a_fifo_or_a_folder_as_a_data_file_is_one_line_not_a_hang(modality, source, tmp_path, capsys):
    import os

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for path, kind in ((fifo, "a FIFO"), (tmp_path, "a folder")):
        argv = ["train", f"modality={modality}", f"data={source}", f"data.path={path}", f"run.root={tmp_path / 'r'}",
                "logger=none"]  # fmt: skip
        assert main(argv) == 2
        assert capsys.readouterr().err == f"poslab: error: data.path={path} is {kind}; give a file\n"


def test_a_run_root_inside_a_loop_of_symbolic_links_is_one_line(tiny, capsys, tmp_path):
    from tests.conftest import assert_refused_in_one_line

    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    root = tmp_path / "a" / "runs"
    assert_refused_in_one_line(tiny, f"run.root={root}", f"run.root '{root}' lies in a loop of symbolic links", capsys)
