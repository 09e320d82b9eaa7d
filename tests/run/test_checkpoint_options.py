"""``checkpoint.*``: ModelCheckpoint's options for the best checkpoint, typed from its signature, with poslab's
guarantees kept: the best one is what the run tests, ``last.ckpt`` stays for resume, every file has its digest."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from poslab.config.composition import compose
from poslab.run.train import train
from tests.conftest import assert_refused_in_one_line


def test_the_best_k_checkpoints_are_kept_and_the_best_of_them_is_tested(tiny):
    summary = train(compose([*tiny, "checkpoint.save_top_k=2", "trainer.max_epochs=3"]))
    folder = Path(summary["run_dir"]) / "checkpoints"
    kept = sorted(p.name for p in folder.glob("best-step*.ckpt"))
    assert len(kept) == 2 and (folder / "last.ckpt").is_file(), kept
    val = dict((step, acc) for step, acc in summary["history"]["val/acc"])  # validation after each epoch
    best_step = max(val, key=lambda step: (val[step], -step))
    assert summary["checkpoints"]["best"] == f"checkpoints/best-step{best_step}.ckpt"
    assert summary["metrics"]["val/acc_best"] == pytest.approx(val[best_step])
    for path in folder.glob("*.ckpt"):  # each written file beside its SHA-256
        assert (folder / f"{path.name}.sha256").read_text().split()[0] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert not [p for p in folder.glob("*.sha256") if not (folder / p.name.removesuffix(".sha256")).exists()]


def test_another_monitored_metric_picks_the_best_checkpoint_and_names_its_best_score(tiny):
    summary = train(compose([*tiny, "checkpoint.monitor=val/loss", "trainer.max_epochs=2"]))
    losses = [loss for _, loss in summary["history"]["val/loss"]]
    assert summary["metrics"]["val/loss_best"] == pytest.approx(min(losses))  # its direction: min, as set for loss
    assert summary["checkpoints"]["best"] == "checkpoints/best.ckpt"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("checkpoint.save_top=3", "unknown config key 'checkpoint.save_top' (did you mean 'checkpoint.save_top_k'?)"),
        ("checkpoint.save_top_k=-2", "'checkpoint.save_top_k' must be >= -1, got -2"),
        ("checkpoint.mode=upward", "config key 'checkpoint.mode' expects one of 'min', 'max' or null, got 'upward'"),
        ("checkpoint.filename=x", "unknown config key 'checkpoint.filename'"),
    ],
)
def test_a_bad_checkpoint_option_is_one_line_and_leaves_nothing(override, message, tiny, capsys):
    assert_refused_in_one_line(tiny, override, message, capsys)
