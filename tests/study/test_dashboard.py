"""``poslab dashboard``: the workspace and report it would save, inspected before ``.save()`` (no server)."""

from __future__ import annotations

import pytest

from poslab.study.dashboard import build_report, build_workspace, compare_summaries, main, plan_dashboard
from poslab.track.summary import RunSummary

ws = pytest.importorskip("wandb_workspaces.workspaces")
wr = pytest.importorskip("wandb_workspaces.reports.v2")


def summary(encoder: str, seed: int, compare_id: str = "20261201-101500-ab12") -> RunSummary:
    return RunSummary(
        kind="train",
        modality="vision",
        encoder=encoder,
        seed=seed,
        config={"logger": {"project": "poslab", "entity": "lab", "tags": ["vision", f"compare:{compare_id}"]}},
        metrics={"test/acc": 0.9, "val/acc_best": 0.91, "test/loss": 0.3, "resolution/acc@56/raw": 0.2},
        history={"train/loss": [[1, 2.0]], "val/acc": [[1, 0.5]]},
        curves={"resolution/curve/image_size": ["resolution/curve/acc/raw", "resolution/curve/acc/rescaled"]},
        run_name=f"{encoder}-s{seed}",
    )


RUNS = [summary("none", 0), summary("rope2d", 0), summary("rope2d", 1)]


def test_the_workspace_shows_the_comparisons_runs_grouped_with_its_headline_bars_and_curves():
    plan = plan_dashboard("20261201-101500-ab12", RUNS)
    workspace = build_workspace(plan)
    assert (workspace.entity, workspace.project) == ("lab", "poslab")
    filters = workspace.runset_settings.filters  # W&B's filter expression
    assert filters == "Metric(\"Tags\") in ['compare:20261201-101500-ab12']"
    assert [g.name for g in workspace.runset_settings.groupby] == ["group"]  # one W&B group per encoder: seeds
    sections = {s.name: s.panels for s in workspace.sections}
    assert list(sections) == ["comparison", "training", "measured curves"]
    bars = sections["comparison"]
    assert all(isinstance(p, wr.BarPlot) for p in bars)
    assert [p.metrics for p in bars] == [["test/acc"], ["val/acc_best"], ["test/loss"]]  # the modality's headline
    assert all(p.groupby_aggfunc == "mean" and p.groupby_rangefunc == "stddev" for p in bars)  # error bars
    assert [p.y for p in sections["training"]] == [["train/loss"], ["val/acc"]]
    assert all(p.x == "trainer/global_step" for p in sections["training"])
    (curve,) = sections["measured curves"]
    assert curve.x == "resolution/curve/image_size"
    assert curve.y == ["resolution/curve/acc/raw", "resolution/curve/acc/rescaled"]
    view = workspace._to_model()  # what .save() would send
    assert "compare:20261201-101500-ab12" in view.model_dump_json()


def test_the_report_holds_the_same_panels_over_the_same_runs():
    report = build_report(plan_dashboard("20261201-101500-ab12", RUNS))
    grids = [b for b in report.blocks if isinstance(b, wr.PanelGrid)]
    assert len(grids) == 3 and report.entity == "lab"
    for grid in grids:
        (runset,) = grid.runsets
        assert runset.groupby == ["group"] and "compare:20261201-101500-ab12" in repr(runset.filters)
    assert [p.metrics for p in grids[0].panels] == [["test/acc"], ["val/acc_best"], ["test/loss"]]


def test_only_the_runs_tagged_with_the_comparison_are_found(tmp_path):
    for s in [*RUNS, summary("alibi", 0, compare_id="other")]:
        s.write(tmp_path / s.run_name)
    found = compare_summaries("20261201-101500-ab12", [tmp_path])
    assert sorted(s.run_name for s in found) == ["none-s0", "rope2d-s0", "rope2d-s1"]


def test_without_credentials_or_runs_it_says_so_in_one_line(tmp_path, capsys):
    for s in RUNS:
        s.write(tmp_path / s.run_name)
    assert main(["20261201-101500-ab12", "--runs", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "online only" in err and "wandb login" in err
    assert main(["nope", "--runs", str(tmp_path)]) == 2
    assert capsys.readouterr().err == "poslab dashboard: error: no finished runs of comparison nope\n"


def test_without_wandb_workspaces_it_names_the_extra(tmp_path, capsys, monkeypatch):
    import sys

    for s in RUNS:
        s.write(tmp_path / s.run_name)
    monkeypatch.setitem(sys.modules, "wandb_workspaces", None)
    assert main(["20261201-101500-ab12", "--runs", str(tmp_path)]) == 2
    assert "pip install 'poslab[dashboard]'" in capsys.readouterr().err
