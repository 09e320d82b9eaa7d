"""What a run says on the console: where it goes (its directory and logs) at its start and end, plain progress
lines where the output is no terminal, the profiler's report in the run directory, no logger in a
fast_dev_run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from poslab.cli import main
from poslab.run.progress import duration

LINE = re.compile(r"^(validation: )?step (\d+)/(\d+) \((\d+)%\)  train/loss \d+\.\d{4}(  val/acc \d\.\d{4})?"
                  r"  elapsed \d+s  eta \d+s$")  # fmt: skip


def run(capsys, tiny, *extra) -> tuple[str, Path]:
    assert main(["train", *tiny, *extra]) == 0
    out = capsys.readouterr().out
    return out, Path(re.search(r"^run directory: (.+)$", out, re.M).group(1))


@pytest.mark.parametrize(
    ("logger", "start", "end"),
    [("csv", "CSV log: {d}/csv/metrics.csv", "CSV log: {d}/csv/metrics.csv"),
     ("tensorboard", "TensorBoard log: {d}/tensorboard (tensorboard --logdir {d}/tensorboard)",
      "TensorBoard log: tensorboard --logdir {d}/tensorboard"),
     ("none", "no logger", None)],
)  # fmt: skip
def test_a_run_says_where_it_goes_when_it_starts_and_where_its_logs_are_when_it_ends(capsys, tiny, logger, start, end):
    out, run_dir = run(capsys, tiny, f"logger={logger}")
    lines = out.splitlines()
    assert lines[0] == f"poslab: train run in {run_dir}; {start.format(d=run_dir)}"
    assert (lines[-1] == end.format(d=run_dir)) if end else lines[-1].startswith("wall time:")


def test_where_the_output_is_no_terminal_progress_is_plain_lines_with_loss_metric_and_eta(capsys, tiny):
    out, _ = run(capsys, tiny, "trainer.enable_progress_bar=true", "trainer.max_epochs=2")
    lines = [line for line in out.splitlines() if "step " in line and "/" in line]
    assert lines and all(LINE.match(line) for line in lines), lines
    steps = [int(LINE.match(line).group(2)) for line in lines if not line.startswith("validation")]
    assert steps == [1, 2, 3, 4, 5, 6]  # 6 steps: a line each (a twentieth of the run, at least one step)
    validations = [line for line in lines if line.startswith("validation: ")]
    assert [int(LINE.match(v).group(2)) for v in validations] == [3, 6] and all("val/acc" in v for v in validations)
    assert lines[-2].startswith("step 6/6 (100%)")
    quiet, _ = run(capsys, tiny, "trainer.enable_progress_bar=false")
    assert not [line for line in quiet.splitlines() if LINE.match(line)]


def test_durations_read_as_hours_minutes_seconds():
    assert [duration(s) for s in (0, 42.4, 187, 3600 + 125)] == ["0s", "42s", "3m07s", "1h02m"]


def test_the_profilers_report_goes_to_the_run_directory_not_the_console(capsys, tiny):
    out, run_dir = run(capsys, tiny, "trainer.profiler=simple")
    assert "Profiler Report" not in out and "Action" not in out
    report = (run_dir / "fit-profiler.txt").read_text()
    assert "Profiler Report" in report and "run_training_epoch" in report


def test_a_fast_dev_run_starts_no_w_and_b_run(capsys, tiny):
    out, run_dir = run(capsys, [o for o in tiny if not o.startswith("logger=")], "logger=wandb", "logger.mode=offline",
                       "trainer.fast_dev_run=true")  # fmt: skip
    assert out.splitlines()[0].endswith("no logger (a fast_dev_run logs nothing)")
    assert not (run_dir / "wandb").exists()
