"""``poslab dashboard``: the workspace and report it would save, inspected before ``.save()`` (no server)."""

from __future__ import annotations

from pathlib import Path

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
    assert filters.startswith("Metric(\"Tags\") in ['compare:20261201-101500-ab12'] and Metric(\"JobType\") == 'train'")
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


def _selected(tree, run: dict) -> bool:
    """W&B's filter tree (``expr_to_filters``) applied to one run record, as the server reads it: ``run``
    keys (tags, jobType) and ``config`` keys; AND / OR of items, ``IN`` and ``=``."""
    if tree.op in ("AND", "OR"):
        results = [_selected(f, run) for f in tree.filters]
        return all(results) if tree.op == "AND" else any(results)
    value = run[tree.key.section].get(tree.key.name)  # a key the run lacks matches nothing
    if tree.op == "IN":
        return bool(set(value) & set(tree.value)) if isinstance(value, list) else value in tree.value
    assert tree.op == "=", tree.op
    return value == tree.value


def _record(offline_dir) -> dict:
    """What W&B holds of a run for filtering, read from the files it wrote offline."""
    from poslab.track.wandb_offline import read_offline_run

    offline = read_offline_run(offline_dir)
    return {"run": {"tags": list(offline.run.tags), "jobType": offline.run.job_type, "group": offline.run.run_group},
            "config": offline.config}  # fmt: skip


@pytest.mark.slow  # five real runs
def test_the_dashboard_selects_the_comparisons_training_runs_and_no_eval_report_or_other_comparison(tiny):
    """A comparison's run, an evaluation of its checkpoint at another image size (it inherits the tag), the
    comparison's report run (tagged too) and a second comparison with other settings: the workspace's and
    the report's filters, applied as W&B applies them, select the first run alone; the eval and the other
    setting also stay out of its W&B group."""
    from wandb_workspaces.expr import expr_to_filters

    from poslab.config.composition import compose
    from poslab.run.train import evaluate, train
    from poslab.study.compare import log_report_run

    wandb = [o for o in tiny if not o.startswith("logger=")] + ["logger=wandb", "logger.mode=offline",
                                                                "logger.entity=lab"]  # fmt: skip
    ours = train(compose([*wandb, "logger.tags=[compare:A]"]))
    other = train(compose([*wandb, "logger.tags=[compare:B]", "model.dim=16", "run.name=other"]))
    checkpoint = Path(ours["run_dir"]) / ours["checkpoints"]["best"]
    evaluation = evaluate(checkpoint, ["data.image_size=56", "logger.mode=offline"])
    retest = evaluate(checkpoint, ["logger.mode=offline"])  # its own setting: only the job type tells it apart
    report_dir = log_report_run(compose([*wandb, "logger.tags=[compare:A]"]), "A", [Path(ours["run_dir"])])
    runs = {
        "ours": _record(ours["wandb"]["dir"]),
        "eval": _record(evaluation["wandb"]["dir"]),
        "retest": _record(retest["wandb"]["dir"]),
        "other": _record(other["wandb"]["dir"]),
        "report": _record(report_dir),
    }
    assert "compare:A" in runs["eval"]["run"]["tags"] and "compare:A" in runs["report"]["run"]["tags"]
    plan = plan_dashboard("A", compare_summaries("A", [Path(ours["run_dir"]).parent]))
    assert plan.runs == 1  # the evaluation's summary.json is no training run
    for filters in (
        build_workspace(plan).runset_settings.filters,
        next(b for b in build_report(plan).blocks if isinstance(b, wr.PanelGrid)).runsets[0].filters,
    ):
        tree = expr_to_filters(filters)
        assert [name for name, record in runs.items() if _selected(tree, record)] == ["ours"]
    groups = {name: record["run"]["group"] for name, record in runs.items()}
    assert groups["ours"] == f"vision-classification-sincos2d-{plan.settings[0]}" and groups["eval"].endswith("-eval")
    assert groups["retest"] == f"{groups['ours']}-eval" and len(set(groups.values())) == 5
