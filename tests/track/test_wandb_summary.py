"""What W&B holds for a run, read from the offline files it wrote: every number of ``summary.json`` in the
W&B run summary under the same key, summaries and axes defined, a quiet console."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from poslab.config.composition import compose
from poslab.config.files import config_dir
from poslab.errors import DataError
from poslab.modalities import available_modalities
from poslab.run.train import train
from poslab.track.wandb_offline import read_offline_run, records
from tests.conftest import SHARED_DATA, tiny_overrides

#: Per modality: (settings that add its end-of-run probes to the tiny run, one experiment of it with what
#: the tiny run needs to run it).
PROBES = {
    "vision": (["eval.image_sizes=[56]"], ["experiment=resolution", "eval.image_sizes=[42]"]),
    "text": ([], ["experiment=needle", "data.eval_sequences=32", "trainer.max_steps=4", "data.context=16"]),
    "timeseries": (["model.layout=query"], ["experiment=calendar", "trainer.max_epochs=1"]),
    "video": (
        ["eval.frames=[8]", "eval.canvases=[32]"],
        ["experiment=motion", "eval.frames=[8]", "eval.canvases=[32]"],
    ),  # fmt: skip
}


def wandb_overrides(request, modality: str, extra: list[str]) -> list[str]:
    tiny = [o for o in tiny_overrides(request, modality) if not o.startswith("logger=")]
    if any(o.startswith("experiment=") for o in extra) and modality == "text":  # its own data, not the corpus
        tiny = [o for o in tiny if not o.startswith(("data=", "data.path=", "data.context="))]
    return [*tiny, *extra, "logger=wandb", "logger.mode=offline"]


def summary_value(wandb_summary: dict, key: str):
    """A metric whose summary W&B aggregates (``{"max": …, "last": …}``) holds the last value there."""
    value = wandb_summary.get(key)
    return value.get("last") if isinstance(value, dict) else value


def assert_all_scalars_in_wandb(summary) -> None:
    held = read_offline_run(summary["wandb"]["dir"]).summary
    scalars = summary.logged_scalars()
    assert scalars, "no scalars"
    missing = sorted(k for k in scalars if summary_value(held, k) is None)
    assert not missing, f"summary.json scalars absent from the W&B summary: {missing}"
    for key, value in scalars.items():
        assert math.isclose(summary_value(held, key), value, rel_tol=1e-6, abs_tol=1e-9), key


def test_the_reader_reads_back_what_w_and_b_wrote(tmp_path):
    """Against a run written here by W&B itself: summary, history, a defined metric, an artifact."""
    import wandb

    run = wandb.init(mode="offline", dir=str(tmp_path), project="reader", settings=wandb.Settings(quiet=True))
    run.define_metric("acc", summary="max,last")
    for step, acc in enumerate([0.5, 0.9, 0.7]):
        run.log({"acc": acc, "step": step, "text": "x" * 40_000})  # a record longer than a 32 KiB block
    run.summary["num_params"] = 1234
    artifact = wandb.Artifact("report-files", type="report")
    (tmp_path / "a.json").write_text("{}")
    artifact.add_file(str(tmp_path / "a.json"))
    run.log_artifact(artifact)
    folder = Path(run.dir).parent
    run.finish()
    wandb.teardown()
    offline = read_offline_run(folder)
    assert offline.summary["acc"] == {"max": 0.9, "last": 0.7} and offline.summary["num_params"] == 1234
    assert offline.logged("acc") == [0.5, 0.9, 0.7] and offline.logged("step") == [0, 1, 2]
    assert len(offline.logged("text")[0]) == 40_000
    assert offline.metric("acc").summary.max and offline.metric("acc").summary.last
    assert [(a.name, a.type) for a in offline.artifacts] == [("report-files", "report")]
    assert offline.run.project == "reader"
    (path,) = folder.glob("run-*.wandb")
    data = bytearray(path.read_bytes())
    data[100] ^= 0xFF  # one flipped byte in the first record
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="bad checksum"):
        records(path)


@pytest.mark.parametrize("modality", available_modalities())
@pytest.mark.parametrize("which", ["default", "experiment"])
def test_every_summary_scalar_is_in_the_wandb_summary_with_the_same_value(request, modality, which):
    """Each modality's probes and one experiment: probe metrics, derived ones (an extension at 1x), the
    best checkpoint's score, the step time, the parameter count and the wall time all reach W&B."""
    probes, experiment = PROBES.get(modality, ([], None))  # a plugin's modality: its plain run
    if which == "experiment" and experiment is None:
        pytest.skip(f"{modality} has no experiment here")
    summary = train(compose(wandb_overrides(request, modality, probes if which == "default" else experiment)))
    assert_all_scalars_in_wandb(summary)
    families = {k.split("/")[0] for k in summary["metrics"]}
    assert modality not in PROBES or families - {"train", "val", "test", "perf"}, "no end-of-run probe ran"


def test_the_best_value_of_the_monitored_metric_is_wandbs_summary_and_probe_metrics_are_not_line_panels(tiny):
    overrides = [o for o in tiny if not o.startswith("logger=")]
    summary = train(compose([*overrides, "logger=wandb", "logger.mode=offline", "eval.image_sizes=[56]",
                             "trainer.max_epochs=2", "trainer.limit_val_batches=1"]))  # fmt: skip
    offline = read_offline_run(summary["wandb"]["dir"])
    val = offline.logged("val/acc")
    assert len(val) == 2 and offline.summary["val/acc"] == {"max": max(val), "last": val[-1]}
    assert offline.summary["val/loss"]["min"] == min(offline.logged("val/loss"))
    assert offline.summary["val/acc_best"] == summary["metrics"]["val/acc_best"] == max(val)
    assert offline.metric("val/acc").step_metric == "trainer/global_step"
    for key in ("resolution/acc@56/raw", "perf/train_step_ms", "perf/tokens_per_s", "perf/mfu", "num_params"):
        assert offline.metric(key).options.hidden, key  # a runs-table column: one point says nothing as a line
    assert offline.metric("test/*").options.hidden
    assert not offline.metric("train/loss") or not offline.metric("train/loss").options.hidden
    # the measured curve has its own axis: accuracy against the image size
    curve = offline.metric("resolution/curve/acc/raw")
    assert curve.step_metric == "resolution/curve/image_size"
    assert offline.logged("resolution/curve/image_size") == [56]
    assert offline.logged("resolution/curve/acc/raw") == [summary["metrics"]["resolution/acc@56/raw"]]


def test_the_text_length_curve_is_logged_against_the_length(request, monkeypatch):
    import poslab.modalities.text.lengen as lengen

    swapped, real = [], lengen.encoder_swapped

    def spy(backbone, encoder):  # what each extension's pass runs the backbone with
        swapped.append((encoder.scaling.type, encoder.scaling.factor))
        return real(backbone, encoder)

    monkeypatch.setattr(lengen, "encoder_swapped", spy)
    summary = train(compose(wandb_overrides(request, "text", ["eval.multiples=[1,2]", "eval.rope_scaling=[yarn]"])))
    assert swapped == [("yarn", 2.0)]  # at 2x only: 1x is the trained model itself
    metrics = summary["metrics"]
    assert metrics["lengen/loss@1x/yarn"] == metrics["lengen/loss@1x"]
    offline = read_offline_run(summary["wandb"]["dir"])
    assert offline.logged("lengen/curve/length") == [16, 32]
    assert offline.logged("lengen/curve/loss/yarn") == [summary["metrics"]["lengen/loss@1x/yarn"],
                                                  summary["metrics"]["lengen/loss@2x/yarn"]]  # fmt: skip
    assert offline.metric("lengen/curve/loss").step_metric == "lengen/curve/length"
    assert "lengen/curve/loss" not in offline.summary  # the curve's points are columns already (@1x, @2x)


@pytest.mark.slow
def test_a_run_prints_its_own_lines_and_only_warnings_from_wandb(tmp_path, data_root):
    """No banner, no offline hints, no `wandb leet`, no history footer, no deprecation warning about
    Lightning's ``anonymous`` argument: the run's last lines are its own."""
    env = {k: v for k, v in os.environ.items() if k != "WANDB_SILENT"}
    cmd = [sys.executable, "-m", "poslab", "train", "logger=wandb", "logger.mode=offline", f"run.root={tmp_path}",
           f"data.root={data_root}", "model.depth=1", "model.dim=32", "trainer.max_epochs=1",
           "trainer.limit_train_batches=2", "trainer.limit_val_batches=1", "trainer.limit_test_batches=1"]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    printed = out.stdout + out.stderr
    assert "wandb:" not in printed, [line for line in printed.splitlines() if "wandb:" in line]
    last = [line for line in out.stdout.splitlines() if line.strip()][-4:]
    assert [line.split(":")[0].split(" ")[0] for line in last] == ["run", "metrics", "wall", "W&B"]
    first = out.stdout.splitlines()[0]
    assert first.startswith(f"poslab: train run in {tmp_path}/vision/") and "; W&B offline: " in first
    assert "smaller than the logging interval" not in printed  # 2 steps, log_every_n_steps=10: said once, by us
    assert "step 2/2 (100%)  train/loss " in out.stdout  # progress as lines: stdout is a pipe here


EXPERIMENTS = sorted(p.stem for p in (config_dir() / "experiment").glob("*.yaml"))


def shrunk_experiment(request, name: str) -> list[str]:
    """The experiment on its modality's tiny run: a sequence task keeps its own data (not the corpus), a
    dataset the experiment names is read from the shared copy, and each probe it sets runs."""
    cfg = compose([f"experiment={name}"])
    if cfg.trainer.get("accelerator") == "gpu":
        pytest.skip(f"{name} is sized for a GPU; its toy-size dry run checks its W&B summary (tests/study/"
                    "test_lengen_experiments.py, tests/data/test_imagefolder.py and test_videofolder.py)")  # fmt: skip
    tiny = [o for o in tiny_overrides(request, cfg.modality) if not o.startswith("logger=")]
    extra = [f"experiment={name}"]
    names_a_dataset = cfg.data.name != compose([f"modality={cfg.modality}"]).data.name
    if cfg.task.name == "sequence" or names_a_dataset:
        tiny = [o for o in tiny if not o.startswith(("data=", "data.path=", "data.context="))]
    if names_a_dataset and cfg.task.name != "sequence":
        if not SHARED_DATA.is_dir():
            pytest.skip(f"experiment {name} reads {cfg.data.name}, which is in ../shared/data only")
        extra += [f"data.root={SHARED_DATA}", "data.download=false"]  # a file the shared copy lacks: skipped
    if cfg.task.name == "sequence":
        extra += ["data.eval_sequences=32", "trainer.max_steps=4", "trainer.val_check_interval=2"]
    return [*tiny, *extra, "trainer.max_epochs=1", "logger=wandb", "logger.mode=offline"]


@pytest.mark.slow  # 16 experiments, ~35 s of the fast tier: each modality's own W&B check stays there
@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_experiments_summary_scalars_are_in_the_wandb_summary(request, name):
    cfg = compose(shrunk_experiment(request, name))
    try:
        summary = train(cfg)
    except DataError as exc:  # the dataset is neither embedded nor in ../shared/data (ILI): nothing to read offline
        if "is missing and data.download=false" not in str(exc):
            raise
        pytest.skip(f"experiment {name} reads {cfg.data.name}, which ../shared/data does not hold")
    assert summary["config"]["experiment"] == name
    assert_all_scalars_in_wandb(summary)
