"""The ready-to-submit SLURM scripts in examples/: valid shell, and their poslab commands make valid configs."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from poslab.config.composition import compose
from poslab.study.compare import plan

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "slurm"
#: What SLURM sets for the scripts' variables: a 2-node x 4-GPU job, array task 3.
SLURM = {"SLURM_JOB_NUM_NODES": "2", "SLURM_NTASKS_PER_NODE": "4", "SLURM_ARRAY_TASK_ID": "3", "RUN_ROOT": "runs",
         "WORKERS": "8", "SLURM_ARRAY_TASK_COUNT": "8"}  # fmt: skip


def poslab_command(script: Path) -> list[str]:
    """The script's ``poslab`` command line (continuations joined), its variables as SLURM would set them."""
    text = script.read_text().replace("\\\n", " ")
    line = next(line for line in text.splitlines() if ".venv/bin/poslab " in line and not line.lstrip().startswith("#"))
    line = re.sub(r"\$\{?(\w+)(:-[^}]*)?\}?", lambda m: SLURM[m.group(1)], line.split(".venv/bin/poslab ", 1)[1])
    return shlex.split(line)


@pytest.mark.parametrize("script", sorted(EXAMPLES.glob("*.sbatch")), ids=lambda p: p.name)
def test_the_script_is_valid_shell_asking_for_a_preemption_signal(script):
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    assert "#SBATCH --signal=USR1@90" in script.read_text() and "#SBATCH --requeue" in script.read_text()
    # without `B:`, SLURM signals the job's steps only: poslab must run as one (srun), not in the batch shell
    text = script.read_text().replace("\\\n", " ")
    (line,) = [line for line in text.splitlines() if ".venv/bin/poslab " in line and not line.lstrip().startswith("#")]
    assert line.lstrip().startswith("srun "), line


def test_the_ddp_script_trains_one_run_over_nodes_times_gpus():
    command = poslab_command(EXAMPLES / "ddp.sbatch")
    assert command[0] == "train"
    cfg = compose(command[1:])
    assert (cfg.trainer.num_nodes, cfg.trainer.devices, cfg.trainer.strategy) == (2, 4, "ddp")


def test_the_array_script_is_one_worker_of_one_grid():
    command = poslab_command(EXAMPLES / "compare-array.sbatch")
    assert command[0] == "compare" and "worker=3/8" in command
    special = ("modality=", "seeds=", "worker=")
    grid = plan("vision", None, 3, [a for a in command[1:] if not a.startswith(special)])
    assert len(grid) >= 3 and all(cfg.trainer.name == "gpu" for _, _, cfg in grid)


@pytest.mark.slow
def test_the_library_example_drives_poslab_with_its_own_trainer_and_writes_a_summary_a_report_reads(
    tiny, tmp_path, monkeypatch, capsys
):
    """``examples/library/own_trainer.py``: poslab's data module and task under a plain ``lightning.Trainer``,
    then :func:`poslab.run.library.finish`: the end-of-run evaluations, the reporting callbacks' numbers and
    figures, and a ``summary.json`` that ``poslab report`` reads."""
    import runpy
    import sys

    from poslab.study.report import build_report

    script = EXAMPLES.parent / "library" / "own_trainer.py"
    own = [o for o in tiny if o.startswith(("run.", "data.", "model."))]
    argv = [*own, "trainer.max_epochs=1", "trainer.limit_train_batches=3", "eval.image_sizes=[42]"]
    monkeypatch.setattr(sys, "argv", [str(script), *argv])
    runpy.run_path(str(script), run_name="__main__")
    (path,) = (tmp_path / "runs" / "vision").glob("own-*/summary.json")
    summary = json.loads(path.read_text())
    assert summary["kind"] == "train" and {"test/acc", "resolution/acc@42/raw", "perf/train_step_ms"} <= set(
        summary["metrics"]
    )
    assert {"encoder/position_similarity", "test/acc_per_class"} <= set(summary["figures"])
    assert (path.parent / "csv").is_dir() and str(path) in capsys.readouterr().out
    assert "resolution/acc@42/raw" in build_report([tmp_path / "runs"], tmp_path / "reports").read_text()
