"""One interrupt path: SIGINT, SIGTERM and SIGUSR1 in every phase end a run with 128 + signal, a checkpoint
where one is meaningful and the resume line; the resumed run ends like an uninterrupted one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from poslab.cli import main
from poslab.config.composition import compose
from poslab.errors import RunInterrupted
from poslab.run.resume import resumed_config
from poslab.run.train import evaluate, train

LONGER = ["trainer.max_epochs=4", "trainer.limit_train_batches=4", "run.checkpoint_every_n_steps=2"]


def resume(overrides: list[str], run_dir: Path):
    again = [*overrides, f"resume={run_dir}"]
    return train(resumed_config(compose(again), again))


def signal_in(monkeypatch, cls, method: str, number: int) -> None:
    """Send this process ``number`` from inside ``cls.method``, once."""
    original = getattr(cls, method)
    sent = []

    def hook(self, *args, **kwargs):
        if not sent:
            sent.append(1)
            os.kill(os.getpid(), number)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(cls, method, hook)


@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGTERM, signal.SIGUSR1], ids=lambda n: n.name)
def test_a_signal_while_testing_ends_with_its_code_and_resume_finishes_the_run(tiny, monkeypatch, number):
    from poslab.tasks.classification import Classifier

    whole = train(compose([*tiny, "run.name=whole"]))
    cut = [*tiny, "run.name=cut"]
    signal_in(monkeypatch, Classifier, "test_step", number)
    with pytest.raises(RunInterrupted, match=f"interrupted by {number.name} after training.*resume=") as caught:
        train(compose(cut))
    assert caught.value.exit_code == 128 + number
    monkeypatch.undo()
    run_dir = Path(whole["run_dir"]).parent / "cut"
    assert not (run_dir / "summary.json").exists()
    resumed = resume(cut, run_dir)
    assert resumed["metrics"]["test/acc"] == whole["metrics"]["test/acc"]
    assert resumed["metrics"]["test/loss"] == whole["metrics"]["test/loss"]


def test_a_signal_in_an_end_of_run_probe_or_between_loops_stops_the_run_at_once(tiny, monkeypatch):
    from poslab.evaluation.probes import ProbePass
    from poslab.tasks.classification import PerClassAccuracy

    probes = [*tiny, "eval.image_sizes=[56]"]
    signal_in(monkeypatch, ProbePass, "test_step", signal.SIGINT)
    with pytest.raises(RunInterrupted, match="interrupted by SIGINT after training") as caught:
        train(compose([*probes, "run.name=in-probe"]))
    assert caught.value.exit_code == 130
    monkeypatch.undo()
    signal_in(monkeypatch, PerClassAccuracy, "summarize", signal.SIGTERM)  # no Lightning loop runs there
    with pytest.raises(RunInterrupted, match="interrupted by SIGTERM after training") as caught:
        train(compose([*probes, "run.name=between"]))
    assert caught.value.exit_code == 143


def test_an_interrupted_evaluation_leaves_nothing(tiny, monkeypatch):
    from poslab.tasks.classification import Classifier

    summary = train(compose(tiny))
    best = Path(summary["run_dir"]) / summary["checkpoints"]["best"]
    signal_in(monkeypatch, Classifier, "test_step", signal.SIGINT)
    with pytest.raises(RunInterrupted, match="while evaluating; nothing was written") as caught:
        evaluate(best, ["run.name=cut"])
    assert caught.value.exit_code == 130
    assert not (Path(summary["run_dir"]) / "eval" / "cut").exists()


def test_the_handlers_are_restored_after_a_run(tiny):
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)}
    train(compose(tiny))
    assert {s: signal.getsignal(s) for s in before} == before


@pytest.mark.slow
@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGTERM, signal.SIGUSR1], ids=lambda n: n.name)
def test_a_real_process_signalled_mid_training_exits_with_its_code_and_resumes_exactly(tiny, number):
    """Ctrl-C included: the fit stops at a step boundary (not mid-step), saves, and the resumed run ends with
    the uninterrupted run's metrics."""
    base = [*tiny, *LONGER]
    whole = train(compose([*base, "run.name=whole"]))
    run_dir = Path(whole["run_dir"]).parent / "cut"
    cut = [*base, "run.name=cut"]
    process = subprocess.Popen([sys.executable, "-m", "poslab", "train", *cut], stderr=subprocess.PIPE, text=True)
    checkpoint = run_dir / "checkpoints" / "last.ckpt"
    deadline = time.time() + 120
    while not checkpoint.exists() and process.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    process.send_signal(number)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 128 + number, err
    lines = [line for line in err.splitlines() if line.startswith("poslab:")]
    assert len(lines) == 1 and f"interrupted by {number.name} at step" in lines[0] and "resume=" in lines[0]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert main(["train", *cut, f"resume={run_dir}"]) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["metrics"]["test/acc"] == whole["metrics"]["test/acc"]
    assert summary["metrics"]["test/loss"] == pytest.approx(whole["metrics"]["test/loss"], abs=1e-6)


def test_a_signal_while_a_compare_plans_its_grid_says_to_rerun_it(tiny, monkeypatch, tmp_path, capsys):
    import poslab.study.compare
    from poslab.cli import main

    real = poslab.study.compare.plan

    def planning(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)  # arrives while the grid is composed, before any run
        return real(*args, **kwargs)

    monkeypatch.setattr(poslab.study.compare, "plan", planning)
    monkeypatch.chdir(tmp_path)
    assert main(["compare", "modality=vision", "encoders=[none]", "seeds=1", *tiny]) == 143
    err = capsys.readouterr().err
    assert err == (
        "poslab: interrupted by SIGTERM between runs; rerun the same `poslab compare` command to continue the grid\n"
    )


def test_a_signal_inside_a_handler_for_failures_is_still_an_interrupt(tiny, monkeypatch, tmp_path, capsys):
    """Reading a YAML turns any failure into 'cannot read'; a signal arriving there stays an interrupt."""
    from omegaconf import OmegaConf

    from poslab.cli import main

    real, sent = OmegaConf.load, []

    def load(path):
        if not sent:
            sent.append(1)
            os.kill(os.getpid(), signal.SIGTERM)
        return real(path)

    monkeypatch.setattr(OmegaConf, "load", staticmethod(load))
    monkeypatch.chdir(tmp_path)
    assert main(["compare", "modality=vision", "encoders=[none]", "seeds=1", *tiny]) == 143
    assert "interrupted by SIGTERM between runs; rerun the same `poslab compare`" in capsys.readouterr().err


@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGTERM, signal.SIGUSR1], ids=lambda n: n.name)
@pytest.mark.parametrize("command", ["report", "list", "train --print-config", "compare modality=vision seeds=1"])
def test_every_command_ends_on_a_signal_with_its_code_and_one_line(
    tiny, monkeypatch, tmp_path, capsys, command, number
):
    """Composing a config, drawing a report, listing: the same path as a run, 128 + signal and one line."""
    import poslab.cli
    import poslab.run.resume
    import poslab.study.compare

    def signalled(*args, **kwargs):
        os.kill(os.getpid(), number)
        time.sleep(5)  # the handler raises at once: the sleep never ends
        raise AssertionError("the signal did not stop the command")

    patched = {
        "report": (poslab.cli, "build_report"),
        "list": (poslab.cli, "_list"),
        "compare": (poslab.study.compare, "plan"),
    }
    owner, name = patched.get(command.split()[0], (poslab.run.resume, "compose"))  # what `poslab train` composes
    monkeypatch.setattr(owner, name, signalled)
    monkeypatch.chdir(tmp_path)
    args = {"report": ["report", str(tmp_path)], "list": ["list"]}.get(command, command.split() + tiny)
    started = time.perf_counter()
    assert main(args) == 128 + number
    assert time.perf_counter() - started < 5
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"interrupted by {number.name}" in err and "Traceback" not in err
    assert not (tmp_path / "reports").exists()


#: Run in a child: the text run, with the phase it is signalled in made observable (a marker file) and long.
CHILD = """
import pathlib, sys, time
import poslab.evaluation.probes as probes
import poslab.modalities.text.lengen as lengen
from poslab.cli import main

marker, phase = pathlib.Path(sys.argv[1]), sys.argv[2]
if phase == "search":
    real = lengen.searched_extension
    def slow_search(*args, **kwargs):
        marker.touch()
        return real(*args, **kwargs)
    lengen.searched_extension = slow_search
    real_measure = lengen.encoder_swapped
    def slow_swap(*args, **kwargs):
        time.sleep(0.2)
        return real_measure(*args, **kwargs)
    lengen.encoder_swapped = slow_swap
else:
    real_step = probes.ProbePass.test_step
    def slow_step(self, *args, **kwargs):
        marker.touch()
        time.sleep(0.2)
        return real_step(self, *args, **kwargs)
    probes.ProbePass.test_step = slow_step
sys.exit(main(["train", *sys.argv[3:]]))
"""


@pytest.mark.slow
@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGTERM, signal.SIGUSR1], ids=lambda n: n.name)
@pytest.mark.parametrize("phase", ["probe", "search"])
def test_a_real_text_run_signalled_in_its_length_study_stops_within_10_s_and_resumes_exactly(
    tiny_text, tmp_path, phase, number
):
    """The end-of-run length study (its probes, LongRoPE's search) ends within 10 s of the signal with its
    code and line, writes no summary, and the resumed run ends with the uninterrupted run's metrics."""
    study = [
        *tiny_text,
        "encoder=rope",
        "eval.multiples=[1,2]",
        "eval.rope_scaling=[longrope]",
        "eval.search_population=4",
        "eval.search_generations=8",
        "eval.search_tokens=64",
    ]
    whole = train(compose([*study, "run.name=whole"]))
    cut = [*study, "run.name=cut"]
    run_dir = Path(whole["run_dir"]).parent / "cut"
    marker = tmp_path / "in-phase"
    child = [sys.executable, "-c", CHILD, str(marker), phase, *cut]
    process = subprocess.Popen(child, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not marker.exists() and process.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    assert marker.exists(), process.communicate()[1]
    signalled = time.perf_counter()
    process.send_signal(number)
    _, err = process.communicate(timeout=60)
    assert time.perf_counter() - signalled <= 10
    assert process.returncode == 128 + number, err
    lines = [line for line in err.splitlines() if line.startswith("poslab:")]
    assert len(lines) == 1 and f"interrupted by {number.name} after training" in lines[0] and "resume=" in lines[0]
    assert "Traceback" not in err
    assert not (run_dir / "summary.json").exists()
    assert main(["train", *cut, f"resume={run_dir}"]) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert sorted(summary["metrics"]) == sorted(whole["metrics"]), set(whole["metrics"]) ^ set(summary["metrics"])
    timed = {k for k in whole["metrics"] if k.startswith("perf/")}  # a clock, not a result
    differ = {
        k: (v, whole["metrics"][k])
        for k, v in summary["metrics"].items()
        if k not in timed and v != whole["metrics"][k]
    }
    assert not differ


@pytest.mark.parametrize("module", ["poslab.cli", "torch"])
def test_a_ctrl_c_while_the_command_loads_is_one_line(module):
    """SIGINT while the command's modules load (the command line's, then torch's before a run): Python raises
    KeyboardInterrupt inside the import; the command ends with one line and 130, no traceback."""
    code = (
        "import sys\n"
        "class Interrupting:\n"
        "    def find_spec(self, name, *rest):\n"
        f"        if name == {module!r}: raise KeyboardInterrupt\n"
        "sys.meta_path.insert(0, Interrupting())\n"
        "sys.argv = ['poslab', 'train', 'logger=none']\n"
        "from poslab.__main__ import run\n"
        "run()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stderr) == (130, "poslab: interrupted\n")
