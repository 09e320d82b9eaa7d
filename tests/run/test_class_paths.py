"""Any class by import path, the LightningCLI way: a callback as ``{class_path, init_args}``, an optimiser or a
scheduler as ``optim.name`` / ``sched.name``; arguments typed from the class's signature, one line when wrong."""

from __future__ import annotations

import sys
import types

import lightning as L
import pytest
import torch

from poslab.config.composition import compose
from poslab.run.train import train
from poslab.tasks.optimizers import configure
from tests.conftest import assert_refused_in_one_line


class CountingCallback(L.Callback):
    """A user's own callback: counts the training batches it saw."""

    seen: list[int] = []

    def __init__(self, label: str, every: int = 1) -> None:
        self.label, self.every = label, every

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step % self.every == 0:
            CountingCallback.seen.append(trainer.global_step)


@pytest.fixture
def user_module(monkeypatch):
    """``userpkg.callbacks``: a module of the user's, importable by its path."""
    module = types.ModuleType("userpkg_callbacks")
    module.CountingCallback = CountingCallback
    monkeypatch.setitem(sys.modules, "userpkg_callbacks", module)
    CountingCallback.seen = []
    return "userpkg_callbacks.CountingCallback"


def test_a_callback_by_class_path_and_init_args_is_typed_built_and_run(tiny, user_module):
    entry = f"callbacks=[{{class_path: {user_module}, init_args: {{label: mine, every: 2}}}}]"
    cfg = compose([*tiny, entry, "trainer.max_epochs=2"])
    assert list(cfg.callbacks) == [{user_module: {"label": "mine", "every": 2}}]
    train(cfg)
    assert CountingCallback.seen == [2, 4, 6]  # 6 steps, every second one
    lightning_own = (
        "callbacks=[{class_path: lightning.pytorch.callbacks.EarlyStopping, init_args: {monitor: val/loss}}]"
    )
    assert compose([*tiny, lightning_own]).callbacks[0]["lightning.pytorch.callbacks.EarlyStopping"]["monitor"] == (
        "val/loss"
    )


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("callbacks=[{class_path: nosuchpkg.Thing}]", "callbacks: cannot import 'nosuchpkg' for 'nosuchpkg.Thing'"),
        ("callbacks=[{class_path: torch.nn.Linear}]", "callbacks: torch.nn.Linear is not a subclass of Callback"),
        ("callbacks=[{class_path: lightning.pytorch.callbacks.Nope}]", "'lightning.pytorch.callbacks' has no class"),
        ("callbacks=[{class_path: userpkg_callbacks.CountingCallback, init_args: {every: two}}]",
         "config key 'callbacks.userpkg_callbacks.CountingCallback.every' expects int, got 'two'"),
        ("callbacks=[{class_path: userpkg_callbacks.CountingCallback, init_arg: {}}]",
         "a class_path entry holds class_path and init_args only"),
        ("optim.name=torch.optim.Adamm", "optim.name: 'torch.optim' has no class 'Adamm'"),
        ("optim.name=torch.nn.Linear", "optim.name: torch.nn.Linear is not a subclass of Optimizer"),
        ("sched.name=torch.optim.SGD", "sched.name: torch.optim.SGD is not a subclass of LRScheduler or"),
        ("logger.also=[{class_path: torch.nn.Linear}]", "logger.also: torch.nn.Linear is not a subclass of Logger"),
        ("logger.also=[{class_path: lightning.pytorch.loggers.CSVLogger, init_args: {flush_logs_every_n_steps: x}}]",
         "'logger.also.lightning.pytorch.loggers.CSVLogger.flush_logs_every_n_steps' expects int, got 'x'"),
    ],
)  # fmt: skip
def test_a_bad_class_path_or_argument_is_one_line(override, message, tiny, user_module, capsys):
    assert_refused_in_one_line(tiny, override, message, capsys)


def test_an_optimiser_and_a_scheduler_by_import_path_take_their_typed_arguments():
    cfg = compose(["optim.name=torch.optim.SGD", "optim.momentum=0.9", "optim.lr=0.1",
                   "sched.name=torch.optim.lr_scheduler.StepLR", "sched.step_size=2", "sched.gamma=0.1"])  # fmt: skip
    built = configure(torch.nn.Linear(2, 2), cfg.optim, cfg.sched, total_steps=10)
    optimizer, scheduler = built["optimizer"], built["lr_scheduler"]["scheduler"]
    assert type(optimizer) is torch.optim.SGD and optimizer.defaults["momentum"] == 0.9
    assert type(scheduler) is torch.optim.lr_scheduler.StepLR and (scheduler.step_size, scheduler.gamma) == (2, 0.1)
    with pytest.raises(Exception, match="'optim.momentum' expects float"):
        compose(["optim.name=torch.optim.SGD", "optim.momentum=fast"])


def test_a_logger_by_class_path_beside_the_preset_logs_the_run_into_the_run_directory(tiny, capsys):
    """``logger.also=[{class_path: …CSVLogger, init_args: {name: mine}}]``: built with the run directory as its
    ``save_dir``, its arguments typed, and it holds the run's numbers."""
    import csv
    import json
    from pathlib import Path

    from poslab.cli import main

    entry = "{class_path: lightning.pytorch.loggers.CSVLogger, init_args: {name: mine, flush_logs_every_n_steps: 1}}"
    assert main(["train", *tiny, f"logger.also=[{entry}]"]) == 0
    out = capsys.readouterr().out
    run_dir = Path(out.split("run directory: ")[1].splitlines()[0])
    summary = json.loads((run_dir / "summary.json").read_text())
    (metrics,) = run_dir.glob("mine/*/metrics.csv")
    tested = [float(r["test/acc"]) for r in csv.DictReader(metrics.open()) if r.get("test/acc")]
    assert tested == [summary["metrics"]["test/acc"]] and f"CSV log: {metrics}" in out.splitlines()[0]
