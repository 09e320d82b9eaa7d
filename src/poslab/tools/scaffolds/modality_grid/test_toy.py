"""The toy grid modality: its data, its options and a short run, on data it makes itself (no network)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from poslab.config import compose
from poslab.data import build_datamodule
from poslab.encoders import available_encoders
from poslab.errors import ConfigError
from poslab.run.train import train
from poslab.tools.options import option_rows


def test_the_label_says_whether_the_top_left_cell_is_larger_than_the_bottom_right():
    data = build_datamodule(compose(["modality=toy", "data.size=50", "data.rows=3", "data.cols=5"]))
    data.setup("fit")
    tokens, labels = data.splits["fit"].tensors
    assert tokens.shape == (50, 15) and labels.tolist() == (tokens[:, 0] > tokens[:, 14]).long().tolist()
    pos = data.positions()
    assert pos.coords_grid == (3, 5) and pos.coords[7].tolist() == [1.0, 2.0]  # token 7: row 1, column 2
    assert not tokens.equal(data.splits["validate"].tensors[0])  # each split its own grids


def test_the_options_are_declared_once_and_checked():
    rows = {key: kind for key, kind, *_ in option_rows(compose(["modality=toy"]))}
    assert rows["data.rows"] == "int, >= 2" and rows["model.dim"].startswith("int")
    with pytest.raises(ConfigError, match="config key 'data.cols' must be >= 2, got 1"):
        compose(["modality=toy", "data.cols=1"])
    assert "rope2d" in available_encoders("toy") and "rope" not in available_encoders("toy")  # coords only


def test_a_short_run_writes_its_summary(tmp_path):
    summary = train(compose(["modality=toy", "encoder=rope2d", "logger=none", f"run.root={tmp_path}",
                             "data.size=64", "trainer.max_epochs=1", "trainer.enable_progress_bar=false"]))  # fmt: skip
    written = json.loads((Path(summary["run_dir"]) / "summary.json").read_text())
    assert Path(summary["run_dir"]).parent == tmp_path / "toy"
    assert written["metrics"]["test/acc"] == summary["metrics"]["test/acc"]
    assert 0.0 <= summary["metrics"]["test/acc"] <= 1.0 and summary["metrics"]["test/loss"] > 0
    assert torch.isfinite(torch.tensor(summary["metrics"]["test/loss"]))
