"""W&B offline runs, mode resolution, and the other logger presets (no server needed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from poslab.config.composition import compose, to_dict
from poslab.run.train import train
from poslab.track.loggers import resolve_wandb_mode


def wandb_run(tiny, *extra):
    overrides = [o for o in tiny if not o.startswith("logger=")]
    return train(compose([*overrides, "logger=wandb", *extra]))


def test_offline_run_writes_its_files_and_finishes(tiny):
    import wandb

    summary = wandb_run(tiny, "logger.mode=offline")
    info = summary["wandb"]
    assert info["mode"] == "offline" and info["url"] is None
    run_dir = Path(info["dir"])
    assert run_dir.name.startswith("offline-run-") and run_dir.is_relative_to(summary["run_dir"])
    (record,) = run_dir.glob("run-*.wandb")
    assert record.stat().st_size > 2000  # flushed, not just the header (finish + teardown)
    media = run_dir / "files" / "media"
    assert list((media / "images").rglob("*.png")), "encoder / per-class figures not logged"
    assert list((media / "table").rglob("*.table.json")), "per-class table not logged"
    assert info["sync_command"] == f"wandb sync {run_dir}"
    assert wandb.run is None  # finished


def test_a_second_run_in_the_same_process_is_separate(tiny):
    first = wandb_run(tiny, "logger.mode=offline", "run.name=first")
    second = wandb_run(tiny, "logger.mode=offline", "run.name=second")
    assert first["wandb"]["dir"] != second["wandb"]["dir"]
    assert Path(second["wandb"]["dir"]).is_relative_to(second["run_dir"])
    for s in (first, second):
        assert len(list(Path(s["run_dir"], "wandb").glob("offline-run-*"))) == 1


def test_explicit_mode_wins_over_the_environment(tiny, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    summary = wandb_run(tiny, "logger.mode=offline")
    assert summary["wandb"]["mode"] == "offline"
    assert list(Path(summary["wandb"]["dir"]).glob("run-*.wandb"))


def test_disabled_mode_writes_no_wandb_files(tiny):
    summary = wandb_run(tiny, "logger.mode=disabled")
    assert summary["wandb"]["mode"] == "disabled" and summary["wandb"]["sync_command"] is None
    assert not list(Path(summary["run_dir"]).rglob("*.wandb"))


def test_the_printed_sync_command_is_valid(tiny):
    summary = wandb_run(tiny, "logger.mode=offline")
    run_dir = summary["wandb"]["dir"]
    wandb_bin = Path(sys.executable).with_name("wandb")
    env = {k: v for k, v in os.environ.items() if k != "WANDB_SILENT"}
    out = subprocess.run(
        [str(wandb_bin), "sync", "--dry-run", run_dir], capture_output=True, text=True, timeout=60, env=env
    )
    assert out.returncode == 0, out.stderr
    assert "Would sync 1 run(s)" in out.stdout + out.stderr


def test_auto_mode(monkeypatch, tmp_path):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "missing"))
    assert resolve_wandb_mode("auto") == "offline"
    netrc = tmp_path / "netrc"
    netrc.write_text("machine api.wandb.ai\n  login user\n  password abc\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    assert resolve_wandb_mode("auto") == "online"
    monkeypatch.setenv("NETRC", str(tmp_path / "missing"))
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert resolve_wandb_mode("auto") == "online"
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert resolve_wandb_mode("auto") == "disabled"
    assert resolve_wandb_mode("offline") == "offline"  # explicit always wins


def test_tensorboard_preset_writes_event_files(tiny):
    overrides = [o for o in tiny if not o.startswith("logger=")]
    summary = train(compose([*overrides, "logger=tensorboard"]))
    assert list(Path(summary["run_dir"], "tensorboard").glob("events.out.tfevents.*"))


def test_wandb_groups_aggregate_seeds_per_experiment_and_encoder():
    from poslab.track.loggers import wandb_group

    assert wandb_group(compose(["modality=text", "encoder=alibi", "seed=3"])) == "text-lm-alibi"
    needle = compose(["experiment=needle", "encoder=alibi"])
    assert wandb_group(needle) == "text-sequence-needle-alibi"
    assert wandb_group(compose(["experiment=needle", "encoder=alibi", "seed=1"])) == wandb_group(needle)
    assert wandb_group(compose(["experiment=needle", "logger.group=mine"])) == "mine"


def test_a_group_names_its_setting_so_seeds_share_it_and_other_settings_or_evaluations_do_not():
    """The setting hash leaves out the seed and what does not compute (where a run writes, how it logs: a
    comparison's tag); any key a run computes with changes it. An evaluation's group says so."""
    from poslab.run.policy import setting_hash
    from poslab.track.loggers import flat_columns, wandb_group

    def setting(*overrides):
        return setting_hash(to_dict(compose(["encoder=rope2d", *overrides])))

    base = setting("seed=0")
    assert len(base) == 6 and all(c in "0123456789abcdef" for c in base)
    assert setting("seed=7") == setting("run.name=x", "logger.tags=[compare:B]", "run.root=/elsewhere") == base
    for other in ("model.dim=96", "data.image_size=56", "optim.lr=0.01", "trainer.max_epochs=2"):
        assert setting(other) != base, other
    cfg = compose(["encoder=rope2d"])
    assert wandb_group(cfg, base) == f"vision-classification-rope2d-{base}"
    assert wandb_group(cfg, base, "eval") == f"vision-classification-rope2d-{base}-eval"
    assert flat_columns(cfg, base)["setting"] == base


def test_online_w_and_b_that_cannot_start_falls_back_to_offline_once(tiny, monkeypatch, capsys):
    """Without credentials (or network) an online run logs offline with one line saying so and how to upload;
    the next run of the process (a comparison's) does not try again."""
    import poslab.track.loggers as loggers

    monkeypatch.setattr(loggers, "_online_failure", None)
    tried = []
    start = loggers._start_wandb

    def counting(*args):
        tried.append(args[-1])
        return start(*args)

    monkeypatch.setattr(loggers, "_start_wandb", counting)
    first = wandb_run(tiny, "logger.mode=online", "run.name=first")
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("poslab:")]
    assert len(lines) == 1 and "W&B could not start online (" in lines[0] and "wandb sync" in lines[0]
    assert first["wandb"]["mode"] == "offline" and first["wandb"]["sync_command"]
    second = wandb_run(tiny, "logger.mode=online", "run.name=second")
    assert tried == ["online", "offline", "offline"] and second["wandb"]["mode"] == "offline"
    assert not [line for line in capsys.readouterr().err.splitlines() if line.startswith("poslab:")]


def test_an_unknown_wandb_mode_in_the_environment_is_one_line(tiny, monkeypatch, capsys, tmp_path):
    from poslab.cli import main

    monkeypatch.setenv("WANDB_MODE", "bogus")
    overrides = [o for o in tiny if not o.startswith(("logger=", "run.root="))]
    assert main(["train", *overrides, "logger=wandb", f"run.root={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert err == "poslab: error: WANDB_MODE=bogus is not a W&B mode; valid: online, offline, disabled\n"
    assert not list((tmp_path / "vision").iterdir())  # nothing left behind


@pytest.mark.slow  # three runs, one resumed
def test_a_sweep_trial_is_the_agents_w_and_b_run_and_resumed_it_stays_so(tiny, monkeypatch):
    """Under ``wandb agent`` (``WANDB_SWEEP_ID`` and ``WANDB_RUN_ID`` in the trial's environment) the run's
    W&B id is the agent's: ``run.json`` and the W&B run agree, and resuming the trial later logs to that run."""
    import json

    from poslab.track.wandb_offline import read_offline_run

    monkeypatch.setenv("WANDB_SWEEP_ID", "abcd1234")
    monkeypatch.setenv("WANDB_RUN_ID", "trial777")
    first = wandb_run(tiny, "logger.mode=offline", "trainer.max_epochs=1", "run.checkpoint_every_n_steps=1")
    run_dir = Path(first["run_dir"])
    assert json.loads((run_dir / "run.json").read_text())["wandb_id"] == "trial777"
    assert read_offline_run(first["wandb"]["dir"]).run.run_id == "trial777"
    monkeypatch.delenv("WANDB_SWEEP_ID")
    monkeypatch.delenv("WANDB_RUN_ID")
    (run_dir / "summary.json").unlink()  # as if the trial had been stopped after its checkpoint
    resumed = wandb_run(tiny, "logger.mode=offline", f"resume={run_dir}", "trainer.max_epochs=2",
                        "run.checkpoint_every_n_steps=1")  # fmt: skip
    assert read_offline_run(resumed["wandb"]["dir"]).run.run_id == "trial777"
    outside = wandb_run(tiny, "logger.mode=offline", "run.name=alone")
    assert json.loads((Path(outside["run_dir"]) / "run.json").read_text())["wandb_id"] != "trial777"


def test_offline_runs_keep_their_checkpoints_as_artifacts_that_wandb_sync_uploads(tiny):
    """``logger.log_model=true`` offline: the best checkpoint is in the offline run as a ``model`` artifact
    (aliases ``best``, ``latest``), byte for byte (W&B's manifest digest is the file's base64 MD5)."""
    import base64
    import hashlib

    from poslab.track.wandb_offline import read_offline_run

    summary = wandb_run(tiny, "logger.mode=offline", "logger.log_model=true")
    models = [a for a in read_offline_run(summary["wandb"]["dir"]).artifacts if a.type == "model"]
    best = next(a for a in models if "best" in a.aliases)
    (entry,) = best.manifest.contents
    data = (Path(summary["run_dir"]) / summary["checkpoints"]["best"]).read_bytes()
    assert entry.path == "model.ckpt" and entry.digest == base64.b64encode(hashlib.md5(data).digest()).decode()


def test_read_wandb_shows_what_an_offline_run_will_show_in_w_and_b(tiny, capsys, tmp_path):
    """``poslab read-wandb``: the run record, config, summary and a logged series of an offline run, as JSON;
    a folder without one is one line."""
    import json

    from poslab.cli import main

    summary = wandb_run(tiny, "logger.mode=offline")
    capsys.readouterr()
    assert main(["read-wandb", summary["run_dir"], "--history", "val/acc"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["run"]["job_type"] == "train" and shown["run"]["group"].startswith("vision-classification-")
    assert (
        shown["config"]["encoder"] == summary["encoder"]
        and shown["summary"]["test/acc"] == summary["metrics"]["test/acc"]
    )
    assert len(shown["history"]["val/acc"]) == 1
    assert main(["read-wandb", str(tmp_path / "empty")]) == 2
    assert (
        capsys.readouterr().err == f"poslab read-wandb: error: {tmp_path / 'empty'}: no offline-run-* folder under it\n"
    )


def test_several_loggers_at_once_each_with_its_own_options(tiny, capsys):
    """``logger=[wandb,csv]``: W&B (offline here) and a CSV file, both holding the run's numbers; the CSV
    logger takes its own ``logger.csv.*``; the run says where each goes."""
    import csv

    from poslab.cli import main

    overrides = [o for o in tiny if not o.startswith("logger=")]
    assert main(["train", *overrides, "logger=[wandb,csv]", "logger.mode=offline",
                 "logger.csv.flush_logs_every_n_steps=1"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    run_dir = Path(out.split("run directory: ")[1].splitlines()[0])
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["config"]["logger"]["also"] == ["csv"] and summary["wandb"]["mode"] == "offline"
    rows = list(csv.DictReader((run_dir / "csv" / "metrics.csv").open()))
    tested = [float(r["test/acc"]) for r in rows if r.get("test/acc")]
    assert tested == [summary["metrics"]["test/acc"]]
    from poslab.track.wandb_offline import read_offline_run

    assert read_offline_run(summary["wandb"]["dir"]).summary["test/acc"] == summary["metrics"]["test/acc"]
    first = out.splitlines()[0]
    assert "; W&B offline: " in first and f"; CSV log: {run_dir / 'csv' / 'metrics.csv'}" in first
    assert out.rstrip().endswith(f"CSV log: {run_dir}/csv/metrics.csv")


@pytest.mark.parametrize(
    "override",
    ["logger=[wandb,wandb]", "logger=[csv,csv]", "logger.also=[mlflow]", "logger=[none,tensorboard,tensorboard]"],
)
def test_loggers_beside_the_preset_are_file_loggers_each_once(override, tiny, capsys):
    from tests.conftest import assert_refused_in_one_line

    assert_refused_in_one_line([o for o in tiny if not o.startswith("logger=")], override,
                               "the loggers beside logger.name=", capsys)  # fmt: skip


def test_a_home_wandb_cannot_write_to_moves_its_folders_into_the_run(tiny, tmp_path, monkeypatch, capsys):
    """A read-only home (here: under a file, which even root cannot write into): W&B's data (artifact staging),
    cache and config folders go under <run>/wandb-home, and the run goes on; a folder the user set stays."""
    from poslab.track import loggers

    (tmp_path / "file").write_text("")
    monkeypatch.setenv("HOME", str(tmp_path / "file" / "home"))
    for variable in (*loggers.WANDB_HOME_FOLDERS, "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "mine"))  # the user's own: never moved
    monkeypatch.setattr(loggers, "_moved", {})
    summary = wandb_run(tiny, "logger.mode=offline", "logger.log_model=true", "run.name=rohome")
    run_dir = Path(summary["run_dir"])
    assert list((run_dir / "wandb-home" / "data" / "artifacts").iterdir())  # the model's checkpoint, staged
    assert os.environ["WANDB_CONFIG_DIR"] == str(tmp_path / "mine")
    assert not (run_dir / "wandb-home" / "config").exists()
    assert f"W&B cannot write its data and cache folders under the home directory; this run keeps them in {run_dir}" \
        f"/wandb-home" in capsys.readouterr().err  # fmt: skip
    monkeypatch.delenv("HOME")  # a writable home again: the next run uses W&B's defaults
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    wandb_run(tiny, "logger.mode=offline", "run.name=home")
    assert "WANDB_DATA_DIR" not in os.environ and (tmp_path / "home" / ".local" / "share" / "wandb").is_dir()
