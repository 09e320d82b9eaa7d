"""Every ``lightning.Trainer`` argument a YAML value can hold is a ``trainer.*`` key, typed from its
signature; the arguments poslab builds itself are refused with where they are configured."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import lightning as L
import pytest
import yaml

from poslab.config import compose, option_rows
from poslab.run.train import train
from poslab.run.trainer import build_trainer
from tests.conftest import assert_refused_in_one_line

#: Object-valued arguments poslab sets: a config cannot hold a logger, a callback or a plugin object.
SET_BY_POSLAB = {"logger", "callbacks", "plugins", "default_root_dir", "enable_checkpointing"}


def test_every_trainer_argument_is_a_key_with_lightnings_default():
    rows = {key: (kind, default) for key, kind, default, _ in option_rows(compose([]))}
    for name, param in inspect.signature(L.Trainer.__init__).parameters.items():
        if name == "self" or name in SET_BY_POSLAB:
            assert f"trainer.{name}" not in rows, name
            continue
        assert f"trainer.{name}" in rows, name
        if name != "enable_model_summary":  # poslab prints its own one-line summary
            assert rows[f"trainer.{name}"][1] == repr(param.default), name
    assert rows["trainer.enable_model_summary"][1] == "False"
    assert rows["trainer.accumulate_grad_batches"][0] == "int, >= 1"
    assert rows["trainer.fast_dev_run"][0] == "bool or int, >= 0"


def test_the_trainer_node_holds_only_what_the_yaml_sets(tmp_path):
    """Unset arguments stay Lightning's: they are not written into every run's config (nor its hash)."""
    root = Path(__file__).resolve().parents[2] / "configs"
    expected = {**yaml.safe_load((root / "train.yaml").read_text())["trainer"],
                **yaml.safe_load((root / "trainer" / "cpu.yaml").read_text())}  # fmt: skip
    expected |= yaml.safe_load((root / "modality" / "vision.yaml").read_text()).get("trainer", {})
    assert dict(compose([]).trainer) == expected
    assert "accumulate_grad_batches" in compose(["trainer.accumulate_grad_batches=2"]).trainer


def test_everyday_trainer_overrides_reach_the_trainer(tiny, tmp_path):
    cfg = compose([*tiny, "trainer.accumulate_grad_batches=2", "trainer.profiler=simple",
                   "trainer.gradient_clip_algorithm=value", "trainer.max_time=00:01:00:00",
                   "trainer.detect_anomaly=true", "trainer.enable_model_summary=true"])  # fmt: skip
    trainer = build_trainer(cfg, tmp_path, None, [])
    from lightning.pytorch.callbacks import ModelSummary, Timer
    from lightning.pytorch.profilers import SimpleProfiler

    assert trainer.accumulate_grad_batches == 2 and isinstance(trainer.profiler, SimpleProfiler)
    assert trainer.gradient_clip_algorithm == "value" and trainer._detect_anomaly
    (timer,) = [c for c in trainer.callbacks if isinstance(c, Timer)]
    assert timer._duration == 3600
    assert any(isinstance(c, ModelSummary) for c in trainer.callbacks)
    default = build_trainer(compose(tiny), tmp_path, None, [])
    assert not any(isinstance(c, ModelSummary) for c in default.callbacks)  # poslab's default: no table


def test_accumulation_and_fast_dev_run_train_as_lightning_does(tiny):
    """Four batches accumulated two by two are two optimiser steps; fast_dev_run is one step."""
    four = [*tiny, "trainer.limit_train_batches=4"]
    plain = train(compose([*four, "run.name=plain"]))
    accumulated = train(compose([*four, "trainer.accumulate_grad_batches=2", "run.name=accumulated"]))
    quick = train(compose([*four, "trainer.fast_dev_run=true", "run.name=quick"]))
    assert [run["history"]["val/loss"][-1][0] for run in (plain, accumulated, quick)] == [4, 2, 1]
    assert accumulated["metrics"]["test/loss"] != plain["metrics"]["test/loss"]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "trainer.accumulate_grad_batch=2",
            "unknown config key 'trainer.accumulate_grad_batch' (did you mean 'trainer.accumulate_grad_batches'?)",
        ),
        ("trainer.fast_dev=true", "(did you mean 'trainer.fast_dev_run'?)"),
        ("trainer.accumulate_grad_batches=x", "config key 'trainer.accumulate_grad_batches' expects int, got 'x'"),
        ("trainer.accumulate_grad_batches=0", "'trainer.accumulate_grad_batches' must be >= 1, got 0"),
        ("trainer.precision=bf17", "'bf16' or null, got 'bf17' (did you mean 'bf16'?)"),
        ("trainer.callbacks=[x]", "'trainer.callbacks' is not a config key: it is set by the top-level callbacks"),
        ("trainer.logger=false", "'trainer.logger' is not a config key: it is set by logger=NAME"),
        ("trainer.plugins=x", "'trainer.plugins' is not a config key: it is set by poslab"),
        ("trainer.default_root_dir=/x", "'trainer.default_root_dir' is not a config key: it is set by run.root"),
        ("trainer.profiler=fancy", "trainer settings rejected"),
    ],
)
def test_a_bad_trainer_setting_is_one_line_and_leaves_nothing(override, message, tiny, capsys):
    assert_refused_in_one_line(tiny, override, message, capsys)


def test_the_generated_argument_table_matches_the_installed_lightnings_signature():
    """Regenerate with `python -m poslab.run.trainer_options` after upgrading Lightning."""
    from importlib import metadata

    from poslab.run import trainer_arguments
    from poslab.run.trainer_options import live_arguments

    if trainer_arguments.LIGHTNING != metadata.version("lightning"):
        pytest.skip(f"table made for Lightning {trainer_arguments.LIGHTNING}; this one reads the signature live")
    assert list(trainer_arguments.ARGUMENTS) == live_arguments()


def test_composing_a_config_does_not_import_lightning():
    """Only commands that train pay Lightning's import: --print-config, list and show compose without it."""
    import subprocess
    import sys

    code = "import sys; from poslab.config.composition import compose; compose(['trainer.fast_dev_run=1']); "
    code += "print('lightning' in sys.modules)"
    import os

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}  # no plugin's imports
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    assert out.strip() == "False"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("trainer.profiler=bogus", "the `profiler` parameter of `Trainer`, it can only be one of"),
        ("trainer.limit_train_batches=1.5", "invalid value 1.5 for limit_train_batches"),
        ("trainer.gradient_clip_algorithm=foo", "`gradient_clip_algorithm` foo is invalid"),
    ],
)
def test_what_lightning_refuses_at_construction_stops_the_run_before_its_data_loads(override, message, tiny,
                                                                                     monkeypatch):  # fmt: skip
    from poslab.errors import ConfigError
    from poslab.modalities.vision.data import VisionDataModule

    loaded = []
    monkeypatch.setattr(VisionDataModule, "prepare_data", lambda self: loaded.append(self))
    with pytest.raises(ConfigError, match=re.escape(message)):
        train(compose([*tiny, override]))
    assert not loaded  # refused before the data module read anything
