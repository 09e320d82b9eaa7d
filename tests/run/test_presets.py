"""``callbacks: [...]``: Lightning callbacks by preset name, their options checked against the class."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lightning.pytorch.callbacks import EarlyStopping, LearningRateMonitor, StochasticWeightAveraging

from poslab.cli import main
from poslab.config.composition import compose
from poslab.run.presets import PRESETS, RunFacts, build_callbacks, lightning_class
from poslab.run.train import train
from tests.conftest import assert_refused_in_one_line

FACTS = RunFacts(monitor="val/acc", mode="max", lr=0.003)


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_preset_builds_from_what_the_run_supplies(name):
    (built,) = build_callbacks([name], FACTS, [])
    assert type(built) is lightning_class(name)


def test_poslab_supplies_the_monitored_metric_and_the_learning_rate_and_options_win():
    stop, swa = build_callbacks([{"early_stopping": {"patience": 7}}, "swa"], FACTS, [])
    assert isinstance(stop, EarlyStopping) and stop.monitor == "val/acc" and stop.mode == "max"
    assert stop.patience == 7
    assert isinstance(swa, StochasticWeightAveraging) and swa._swa_lrs == 0.003
    (mine,) = build_callbacks([{"early_stopping": {"monitor": "val/loss", "mode": "min"}}], FACTS, [])
    assert mine.monitor == "val/loss" and mine.mode == "min"


def test_a_preset_of_a_class_the_run_has_replaces_it():
    own = LearningRateMonitor(logging_interval="step")
    kept = object()
    out = build_callbacks([{"lr_monitor": {"logging_interval": "epoch"}}], FACTS, [kept, own])
    assert out[0] is kept and len(out) == 2
    assert isinstance(out[1], LearningRateMonitor) and out[1].logging_interval == "epoch"


def test_early_stopping_ends_a_run_that_stops_improving(tiny):
    """A learning rate of 1e-9 leaves the validation accuracy where it starts: patience 1 stops at epoch 2."""
    overrides = [*tiny, "trainer.max_epochs=20", "optim.lr=1e-9", "callbacks=[{early_stopping:{patience:1}}]"]
    summary = train(compose(overrides))
    assert len(summary["history"]["val/acc"]) == 2
    assert summary["config"]["callbacks"] == [{"early_stopping": {"patience": 1}}]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("callbacks=[early_stop]", "unknown callback preset 'early_stop' (did you mean 'early_stopping'?); valid:"),
        ("callbacks=[{early_stopping:{patiense:2}}]",
         "unknown config key 'callbacks.early_stopping.patiense' (did you mean 'callbacks.early_stopping.patience'?)"),
        ("callbacks=[{early_stopping:{patience:x}}]", "config key 'callbacks.early_stopping.patience' expects int"),
        ("callbacks=[{swa:{annealing_strategy:cosine}}]",
         "'callbacks.swa.annealing_strategy' expects one of 'cos', 'linear', got 'cosine' (did you mean 'cos'?)"),
        ("callbacks=[[x]]", "callbacks: each entry is a preset name or {name: {options}}, got ['x']"),
    ],
)  # fmt: skip
def test_a_bad_preset_is_one_line_and_leaves_nothing(override, message, tiny, capsys):
    assert_refused_in_one_line(tiny, override, message, capsys)


@pytest.mark.parametrize("logger", ["none", "csv"])
@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_preset_trains_a_run_or_is_refused_in_one_line_before_it_starts(tiny, capsys, preset, logger):
    """Each preset in a real (tiny) run, with and without a logger: the run finishes with a finite summary,
    or (a preset that logs, without a logger) one line and nothing written."""
    import math

    run_root = Path(next(o for o in tiny if o.startswith("run.root=")).split("=", 1)[1])
    args = ["train", *[o for o in tiny if not o.startswith("logger=")], f"logger={logger}", f"callbacks=[{preset}]"]
    code = main(args)
    err = capsys.readouterr().err
    if PRESETS[preset].logs and logger == "none":
        assert code == 2 and err.count("\n") == 1 and f"callbacks: {preset} writes to the run's logger" in err
        assert not run_root.exists() or not any(run_root.iterdir())
        return
    assert code == 0, err[-2000:]
    (summary,) = run_root.rglob("summary.json")
    assert all(math.isfinite(v) for v in json.loads(summary.read_text())["metrics"].values())
