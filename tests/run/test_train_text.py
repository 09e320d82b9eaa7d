"""Text runs end to end on a generated corpus: every 1D encoder, length generalisation, eval."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from poslab.config.composition import compose
from poslab.encoders import available_encoders
from poslab.modalities.text.sequence import DEPTH_BUCKETS
from poslab.run.train import evaluate, train


@pytest.mark.parametrize("encoder", available_encoders("text"))
def test_every_text_encoder_trains_a_few_steps(tiny_text, encoder):
    summary = train(compose([*tiny_text, f"encoder={encoder}"]))
    metrics = summary["metrics"]
    assert metrics["val/loss"] > 0 and metrics["test/loss"] > 0
    assert metrics["test/bpc"] == pytest.approx(metrics["test/loss"] / torch.log(torch.tensor(2.0)).item(), rel=1e-5)
    assert metrics["test/ppl"] == pytest.approx(torch.exp(torch.tensor(metrics["test/loss"])).item(), rel=1e-5)
    assert metrics["lengen/loss@1x"] == pytest.approx(metrics["test/loss"], rel=1e-4)  # same windows at 1x
    rows = summary["tables"]["lengen/loss"]["rows"]
    if encoder == "learned":
        assert "lengen/loss@2x" not in metrics
        assert any(r[1] == 2 and r[3] is None and "max_len" in r[4] for r in rows)
    else:
        assert {f"lengen/loss@{m}x" for m in (1, 2, 4, 8)} <= set(metrics)
    if encoder == "rope":
        assert {f"lengen/loss@8x/{e}" for e in ("linear", "ntk", "dynamic", "yarn")} <= set(metrics)
    assert (Path(summary["run_dir"]) / summary["figures"]["lengen/loss"]).exists()


def test_randomized_positions_train_and_extend_a_learned_table(tiny_text):
    summary = train(compose([*tiny_text, "encoder=learned", "data.random_positions=256"]))
    ckpt = torch.load(Path(summary["run_dir"]) / "checkpoints" / "best.ckpt", weights_only=True)
    assert ckpt["state_dict"]["model.backbone.encoder.table.weight"].shape[0] == 256
    assert "lengen/loss@8x" in summary["metrics"]  # 8 x 16 = 128 < 256 positions


def test_the_end_of_run_evaluations_run_under_the_runs_precision(tiny_text):
    """bf16-mixed (what trainer=gpu uses; autocast on the CPU here): length generalisation at 1x is the test
    loss, as in float32, because the evaluations after the test run under the same autocast."""
    overrides = [*tiny_text, "trainer.max_steps=4", "trainer.val_check_interval=4", "eval.multiples=[1,2]"]
    metrics = train(compose([*overrides, "trainer.precision=bf16-mixed"]))["metrics"]
    assert metrics["lengen/loss@1x"] == pytest.approx(metrics["test/loss"], rel=1e-7, abs=0)


def test_text_checkpoint_re_evaluates(tiny_text):
    summary = train(compose([*tiny_text, "encoder=alibi"]))
    again = evaluate(Path(summary["run_dir"]) / "checkpoints" / "best.ckpt", ["logger=none", "eval.multiples=[1,2]"])
    assert again["metrics"]["test/loss"] == pytest.approx(summary["metrics"]["test/loss"], rel=1e-6)
    assert set(k for k in again["metrics"] if k.startswith("lengen/")) == {"lengen/loss@1x", "lengen/loss@2x"}
    on_disk = json.loads((Path(again["run_dir"]) / "summary.json").read_text())
    assert on_disk["kind"] == "eval" and on_disk["config"]["eval"]["multiples"] == [1, 2]


def test_text_run_logs_lengen_table_and_chart_to_wandb(tiny_text):
    overrides = [o for o in tiny_text if not o.startswith("logger=")]
    summary = train(compose([*overrides, "logger=wandb", "logger.mode=offline", "encoder=rope"]))
    media = Path(summary["wandb"]["dir"], "files", "media")
    tables = [p.relative_to(media).as_posix() for p in media.joinpath("table").rglob("*.table.json")]
    assert any(t.startswith("table/lengen/loss_") and "curve" not in t for t in tables), tables  # the table
    assert any(t.startswith("table/lengen/loss_curve") for t in tables), tables  # the line plot's data
    assert list(media.joinpath("images", "lengen").glob("loss_*.png"))  # the PNG


@pytest.mark.parametrize("task", ["copy", "reverse", "associative_recall"])
def test_sequence_tasks_train_and_report_accuracy_by_length(tiny_text, task):
    overrides = [o for o in tiny_text if not o.startswith(("data=", "data.path"))]
    summary = train(
        compose([*overrides, f"data={task}", "task.name=sequence", "data.eval_sequences=40", "encoder=alibi"])
    )
    metrics = summary["metrics"]
    assert 0.0 <= metrics["test/acc"] <= 1.0 and "test/bpc" not in metrics
    assert {f"lengen/acc@{m}x" for m in (1, 2, 4, 8)} <= set(metrics)
    if task == "associative_recall":
        rows = summary["tables"]["lengen/acc_by_depth"]["rows"]
        assert len(rows) == 4 * DEPTH_BUCKETS and {r[0] for r in rows} == {16, 32, 64, 128}
        assert all(r[2] is not None for r in rows)  # every depth bucket filled at every length
        assert (Path(summary["run_dir"]) / summary["figures"]["lengen/acc_by_depth"]).exists()
