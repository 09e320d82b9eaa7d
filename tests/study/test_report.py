"""Reports from hand-made summary.json files; compare: grid, resumption, end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from poslab.config.composition import compose, to_dict
from poslab.errors import ConfigError, PoslabError
from poslab.files import umask
from poslab.modalities import available_modalities
from poslab.modalities.text import report as text_report
from poslab.modalities.timeseries import report as timeseries_report
from poslab.run.policy import config_hash
from poslab.study import report_figures
from poslab.study.compare import compare, plan, wide_table
from poslab.study.report import aggregate, build_report, check_expectations, find_summaries, group_runs
from poslab.track.wandb_offline import read_offline_run


def fake_summary(root: Path, encoder: str, seed: int, metrics: dict, lr: float = 1e-3) -> Path:
    cfg = to_dict(compose(["modality=text", f"encoder={encoder}", f"seed={seed}", f"optim.lr={lr}"]))
    run = root / "text" / f"{encoder}-s{seed}-{lr}"
    run.mkdir(parents=True)
    payload = {"kind": "train", "modality": "text", "encoder": encoder, "seed": seed, "config": cfg}
    payload |= {"metrics": metrics, "num_params": 1000, "run_dir": str(run)}
    (run / "summary.json").write_text(json.dumps(payload))
    return run


def test_expectations_of_the_mean_over_variants_and_of_the_best_encoder(tmp_path):
    """``<encoder>/mean`` is the mean of its variants' seed means (a benchmark's row, the mean over horizons),
    not of its runs; ``best`` is one check, held when one encoder holds it, naming the widest margin."""
    mse = {("rope", "h96"): [0.40, 0.42], ("rope", "h720"): [0.51], ("alibi", "h96"): [0.38],
           ("alibi", "h720"): [0.50], ("none", "h96"): [0.6], ("none", "h720"): [0.7]}  # fmt: skip
    stated = [
        "best */mean: test/mse <= 1.05 * 0.44",
        "best */mean: test/mse <= 0.43",
        "alibi/mean: test/mse < rope/mean:test/mse",
        "rope/mean: test/mse <= 0.45",
        "rope: test/mse < 0.45",
        "*-none/mean: test/mse < none/mean:test/mse",
    ]
    for (encoder, variant), values in mse.items():
        for seed, value in enumerate(values):
            run = fake_summary(tmp_path / variant, encoder, seed, {"test/mse": value}, lr=int(variant[1:]) * 1e-6)
            payload = json.loads((run / "summary.json").read_text())
            payload["config"] |= {"variant": variant, "expect": stated}
            (run / "summary.json").write_text(json.dumps(payload))
    groups = group_runs(find_summaries([tmp_path]))
    assert sorted(g.label for g in groups) == sorted(f"{e}/{v}" for e, v in mse)
    rows = [(label, held, detail) for text, label, held, detail in check_expectations(groups, stated)]
    assert rows == [
        ("alibi/mean", True, "0.4400 <= 0.4620"),
        ("alibi/mean", False, "0.4400 <= 0.4300"),
        ("alibi/mean", True, "0.4400 < 0.4600"),
        ("rope/mean", False, "0.4600 <= 0.4500"),  # the runs' mean, 0.4433, would hold
        ("rope/h720", False, "0.5100 < 0.4500"),  # an encoder's name covers its variants, not its mean
        ("rope/h96", True, "0.4100 < 0.4500"),
        ("alibi/mean", True, "0.4400 < 0.6500"),
        ("rope/mean", True, "0.4600 < 0.6500"),
    ]
    header, table = wide_table(groups)  # W&B's table: a variant's row carries its encoder's mean's verdicts too
    verdicts = {row[0]: row[header.index("expectations")] for row in table}
    assert "rope/mean: test/mse <= 0.45: did not hold (0.4600 <= 0.4500)" in verdicts["rope/h720"]
    assert "rope: test/mse < 0.45: held" in verdicts["rope/h96"] and "rope/mean" in verdicts["rope/h96"]
    assert "rope/mean: test/mse <= 0.45" not in verdicts["alibi/h96"]


def test_mean_and_std_over_seeds_are_exact():
    stat = aggregate([1.0, 2.0, 4.0])
    assert stat.mean == pytest.approx(7 / 3) and stat.std == pytest.approx(1.5275252316519468) and stat.n == 3
    assert aggregate([]) is None and aggregate([2.0]).std is None  # one seed: undefined, not 0
    assert str(aggregate([2.0])) == "2.0000 (n=1)"


def test_one_seed_has_no_standard_deviation_in_the_w_and_b_table_or_bars(tmp_path):
    from poslab.study.compare import bar_series

    for seed, loss in ((0, 1.5), (1, 1.7)):
        fake_summary(tmp_path, "alibi", seed, {"val/loss": loss})
    fake_summary(tmp_path, "learned", 0, {"val/loss": 1.6})
    groups = group_runs(find_summaries([tmp_path]))
    header, rows = wide_table(groups)
    std = header.index("val/loss std")
    by_label = {row[0]: row for row in rows}
    assert by_label["alibi"][std] == pytest.approx(0.1414213562) and by_label["learned"][std] is None
    assert by_label["learned"][std + 1] == 1  # n
    bars = {row[0]: row for row in bar_series(groups)["val/loss"]}
    assert bars["learned"] == ["learned", 1.6, None, 1]


def test_report_tables_curves_and_missing_metrics(tmp_path):
    runs = tmp_path / "runs"
    for seed, loss in ((0, 1.5), (1, 1.7)):
        fake_summary(runs, "alibi", seed, {"val/loss": loss, "lengen/loss@1x": loss, "lengen/loss@2x": loss - 0.1})
    fake_summary(runs, "learned", 0, {"val/loss": 1.6, "lengen/loss@1x": 1.6})
    fake_summary(runs, "learned", 0, {"val/loss": 9.9}, lr=3e-3)  # another config: its own group
    eval_dir = runs / "text" / "alibi-s0-0.001" / "eval" / "x"
    eval_dir.mkdir(parents=True)
    (eval_dir / "summary.json").write_text(json.dumps({"kind": "eval"}))
    summaries = find_summaries([runs])
    assert len(summaries) == 4  # the evaluation run is not a training run
    groups = group_runs(summaries)
    labels = [g.label for g in groups]
    assert labels[0] == "alibi" and len({lbl for lbl in labels if lbl.startswith("learned [")}) == 2
    assert groups[0].stat("val/loss").mean == pytest.approx(1.6) and groups[0].stat("val/loss").n == 2
    alibi_curve = text_report.multiples(groups[0], "lengen/loss")
    assert alibi_curve == {"base": {1: pytest.approx(1.6), 2: pytest.approx(1.5)}}
    path = build_report([runs], tmp_path / "reports")
    text = path.read_text()
    assert "| `alibi` | 1.6000 ± 0.1414 (n=2) |" in text
    learned_row = next(line for line in text.splitlines() if line.startswith("| `learned [") and "1.6000" in line)
    assert "| — |" in learned_row  # no 2x value: shown as missing
    assert list(path.parent.glob("*.png"))


def fake_run(root: Path, modality: str, encoder: str, seed: int, metrics: dict, history: dict) -> None:
    cfg = to_dict(compose([f"modality={modality}", f"encoder={encoder}", f"seed={seed}"]))
    run = root / modality / f"{encoder}-s{seed}"
    run.mkdir(parents=True)
    payload = {"kind": "train", "modality": modality, "encoder": encoder, "seed": seed, "config": cfg}
    payload |= {"metrics": metrics, "history": history, "num_params": 10, "run_dir": str(run)}
    (run / "summary.json").write_text(json.dumps(payload))


def test_report_draws_every_curve_the_runs_measured(tmp_path):
    runs = tmp_path / "runs"
    for seed in (0, 1):
        curve = {"train/loss": [[10, 2.0], [20, 1.0 + seed]], "val/acc": [[20, 0.9]]}
        for encoder in ("none", "rope2d"):
            scores = {"test/acc": 0.9, "resolution/acc@56/raw": 0.2, "resolution/acc@56/rescaled": 0.8 + seed / 10}
            fake_run(runs, "vision", encoder, seed, scores, curve)
        fake_run(
            runs, "text", "rope", seed, {"lengen/loss@1x": 1.7, "lengen/loss@2x": 2.5, "lengen/loss@2x/yarn": 1.8}, {}
        )
        forecast = {"test/mse": 0.1, "test/mse@h1-24": 0.05, "test/mse@h25-48": 0.15, "probe/irregular_mse": 0.3}
        extrap = {"extrap/mse@2xH": 0.2, "extrap/mse@2xL": 0.25}
        fake_run(runs, "timeseries", "cyclic", seed, forecast | extrap, {"val/mse": [[5, 0.2]]})
    path = build_report([runs], tmp_path / "reports")
    pictures = sorted(p.name for p in path.parent.glob("*.png"))
    assert pictures == [
        "text-default-lengen_loss.png",
        "text-default-rope_scaling.png",
        "timeseries-default-forecast.png",
        "timeseries-default-training.png",
        "vision-default-resolution.png",
        "vision-default-training.png",
    ]
    text = path.read_text()
    assert "`resolution/acc@56/rescaled`" in text and "0.8500 ± 0.0707 (n=2)" in text
    assert "![training curves](vision-default-training.png)" in text
    assert "| yarn | — | 1.8000 ± 0.0000 (n=2) |" in text and "| no scaling | 1.7000" in text  # extensions table
    vision = [g for g in group_runs(find_summaries([runs / "vision"])) if g.encoder == "none"][0]
    assert text_report.multiples(vision, "resolution/acc") == {}
    text_group = group_runs(find_summaries([runs / "text"]))[0]
    assert text_report.multiples(text_group, "lengen/loss") == {"base": {1: 1.7, 2: 2.5}, "yarn": {2: 1.8}}
    series = group_runs(find_summaries([runs / "timeseries"]))
    panels = timeseries_report.forecast(series).axes
    assert [ax.get_title() for ax in panels][1:] == ["irregular-sampling probe", "beyond training (query layout)"]
    lines = {line.get_label(): list(line.get_ydata()) for line in panels[2].get_lines()}
    assert lines == {"cyclic 2x horizon": [0.1, 0.2], "cyclic 2x lookback": [0.1, 0.25]}  # 1x = test/mse
    # training curves average the seeds at the steps every seed recorded
    assert report_figures._mean_curve(vision.runs, "train/loss") == {10: 2.0, 20: 1.5}


def test_report_without_runs_is_a_clear_error(tmp_path):
    with pytest.raises(PoslabError, match="no finished training runs"):
        build_report([tmp_path], tmp_path / "reports")


def test_grid_names_runs_by_config_hash(tmp_path):
    grid = plan("vision", ["none", "sincos2d"], 2, [f"run.root={tmp_path}"])
    assert [(e, s) for e, s, _ in grid] == [("none", 0), ("none", 1), ("sincos2d", 0), ("sincos2d", 1)]
    _, _, cfg = grid[0]
    expected = compose(["encoder=none", "seed=0", f"run.root={tmp_path}", "experiment=resolution"])
    assert cfg.run.name == f"none-s0-{config_hash(to_dict(expected))}"
    changed = plan("vision", ["none"], 1, [f"run.root={tmp_path}", "optim.lr=1e-2"])[0][2]
    assert changed.run.name != cfg.run.name
    same_but_logged_elsewhere = plan("vision", ["none"], 1, [f"run.root={tmp_path}", "logger=csv"])[0][2]
    assert same_but_logged_elsewhere.run.name == cfg.run.name


def test_compare_runs_the_modalitys_default_experiment_unless_one_is_given():
    for modality in available_modalities():  # each runs the experiment its YAML names, if any
        named = compose([f"modality={modality}"]).compare_experiment
        assert plan(modality, None, 1, [])[0][2].experiment == named
    assert compose(["modality=text"]).compare_experiment == "alibi_extrapolation"  # as the README says
    text = sorted({e for e, _, _ in plan("text", None, 1, [])})
    assert text == ["alibi", "fire", "kerple", "learned", "none", "pope", "rope", "sinusoidal", "xpos"]
    assert plan("vision", None, 1, ["experiment=quadrant"])[0][2].experiment == "quadrant"
    plain = plan("vision", ["none"], 1, ["experiment=null"])[0][2]
    assert plain.experiment is None and list(plain.eval.image_sizes) == []


@pytest.mark.slow  # a whole comparison or fresh processes: 6-8 s, kept out of the 5-minute tier
def test_without_seeds_compare_takes_the_experiments_compare_seeds():
    assert [seed for _, seed, _ in plan("vision", ["none"], None, [])] == [0, 1, 2]  # train.yaml: 3
    video = plan("video", None, None, [])  # the motion experiment: 11 encoders and 2 own variants, 3 seeds
    assert len(video) == 39 and {seed for _, seed, _ in video} == {0, 1, 2}
    one = plan("video", None, None, ["compare_seeds=1"])  # an experiment's (or the command line's) compare_seeds
    assert len(one) == 13 and {seed for _, seed, _ in one} == {0}
    assert len(plan("video", ["rope3d"], 2, [])) == 2  # seeds= wins
    with pytest.raises(ConfigError, match="seeds must be at least 1"):
        plan("video", ["rope3d"], 0, [])


def test_the_hash_ignores_what_only_plans_or_checks_a_run():
    cfg = to_dict(compose(["encoder=none"]))
    planned = to_dict(compose(["encoder=none", 'expect=["none: test/acc <= 0.3"]', "compare_encoders=[none]"]))
    assert config_hash(planned) == config_hash(cfg)
    assert config_hash(to_dict(compose(["encoder=none", "seed=1"]))) != config_hash(cfg)


@pytest.mark.slow  # a whole comparison or fresh processes: 6-8 s, kept out of the 5-minute tier
def test_compare_end_to_end_resumes_and_logs_a_report_run(tiny, tmp_path):
    overrides = [o for o in tiny if not o.startswith("logger=")] + ["logger=wandb", "logger.mode=offline"]
    lines: list[str] = []
    first = compare("vision", ["none", "sincos2d"], 1, overrides, tmp_path / "reports", echo=lines.append)
    assert [o.status for o in first["outcomes"]] == ["trained", "trained"]
    assert any(line.startswith("[2/2] sincos2d seed 0:") and "ETA" in line for line in lines)
    assert first["report"].exists()
    runs_root = Path(next(o for o in tiny if o.startswith("run.root=")).split("=", 1)[1])
    report_runs = list(runs_root.glob("wandb/offline-run-*"))
    assert len(report_runs) == 1 and list(report_runs[0].glob("files/media/table/**/*.table.json"))
    # one line syncs every W&B run of the comparison: both training runs and the report run
    (sync,) = [line.split(": ", 1)[1] for line in lines if line.startswith("W&B ran offline; to upload every run")]
    folders = sync.split()[2:]
    assert sync.startswith("wandb sync ") and len(folders) == 3 and str(report_runs[0]) in folders
    assert all(Path(f).name.startswith("offline-run-") for f in folders)
    offline = read_offline_run(report_runs[0])
    table = offline.summary["compare/table"]
    wide = json.loads((report_runs[0] / "files" / table["path"]).read_text())
    assert [row[0] for row in wide["data"]] == ["none", "sincos2d"]  # a row per encoder
    for column in ("runs", "params", "test/acc mean", "test/acc std", "test/acc n", "expectations_held"):
        assert column in wide["columns"], column
    acc = wide["columns"].index("test/acc mean")
    tested = {s.encoder: s.metrics["test/acc"] for s in find_summaries([runs_root])}
    assert [row[acc] for row in wide["data"]] == [tested["none"], tested["sincos2d"]]
    for metric in ("test/acc", "val/acc_best", "test/loss"):  # the modality's headline metrics: a bar chart each
        assert f"compare/{metric}_bar_table" in offline.summary, metric
    (artifact,) = [a for a in offline.artifacts if a.type == "report"]
    files = {entry.path for entry in artifact.manifest.contents}
    assert artifact.type == "report" and "report.md" in files and any(f.endswith(".png") for f in files)
    assert sum(f.startswith("runs/vision/") and f.endswith("/summary.json") for f in files) == 2
    logged = {p.name.split("_table_")[0] for p in report_runs[0].glob("files/media/table/compare/*.table.json")}
    assert {"resolution_rescaled_overlay", "resolution_raw_overlay"} <= logged  # the default experiment's curves
    assert list(report_runs[0].glob("files/media/images/compare/figure/*.png"))
    tags = [{t for t in s["config"]["logger"]["tags"] if t.startswith("compare:")} for s in find_summaries([runs_root])]
    assert len(tags) == 2 and all(len(t) == 1 for t in tags) and tags[0] == tags[1]  # one comparison id, every run
    again = compare("vision", ["none", "sincos2d"], 1, overrides, tmp_path / "reports", echo=lines.append)
    assert [o.status for o in again["outcomes"]] == ["skipped", "skipped"]
    changed = compare("vision", ["none"], 1, [*overrides, "optim.lr=1e-2"], tmp_path / "reports", echo=lines.append)
    assert [o.status for o in changed["outcomes"]] == ["trained"]


def test_a_failing_run_is_reported_and_the_rest_continue(tiny, tmp_path, monkeypatch):
    import poslab.run.train as train_module

    real = train_module.train

    def flaky(cfg):
        if cfg.encoder.name == "none":
            raise RuntimeError("boom")
        return real(cfg)

    monkeypatch.setattr(train_module, "train", flaky)
    lines: list[str] = []
    result = compare("vision", ["none", "sincos2d"], 1, tiny, tmp_path / "reports", echo=lines.append)
    assert [o.status for o in result["outcomes"]] == ["failed", "trained"]
    assert any("1 run(s) failed: none seed 0: boom" in line for line in lines)


def test_recall_accuracy_by_depth_is_averaged_over_seeds_and_tabled(tmp_path):
    """The needle report: per (length, depth) mean over seeds; a bucket no query fell in stays missing."""
    runs = tmp_path / "runs"
    for seed, deep in ((0, 0.5), (1, 0.7)):
        rows = [[16, 0.0, 1.0], [16, 0.5, None], [128, 0.0, 0.2], [128, 0.5, deep]]
        fake_run(runs, "text", "alibi", seed, {"lengen/acc@1x": 1.0, "lengen/acc@8x": 0.4}, {})
        summary = runs / "text" / f"alibi-s{seed}" / "summary.json"
        payload = json.loads(summary.read_text())
        payload["tables"] = {"lengen/acc_by_depth": {"columns": ["length", "depth", "acc"], "rows": rows}}
        summary.write_text(json.dumps(payload))
    group = group_runs(find_summaries([runs]))[0]
    assert text_report.depth_accuracy(group) == {
        16: {0.0: 1.0, 0.5: None},
        128: {0.0: pytest.approx(0.2), 0.5: pytest.approx(0.6)},
    }
    path = build_report([runs], tmp_path / "reports")
    text = path.read_text()
    assert "Recall accuracy by depth of the queried pair (0 = start), 128 tokens:" in text
    assert "| `alibi` | 0.20 | 0.60 |" in text and "| `alibi` | 1.00 | — |" in text
    assert (path.parent / "text-default-recall_depth.png").exists()


def test_recall_depth_panels_share_every_length(tmp_path):
    """Encoders evaluated at different lengths: every panel has a row per length (missing ones blank)."""
    runs = tmp_path / "runs"
    for encoder, lengths in (("alibi", (16, 32)), ("learned", (16,))):
        fake_run(runs, "text", encoder, 0, {"lengen/acc@1x": 1.0}, {})
        summary = runs / "text" / f"{encoder}-s0" / "summary.json"
        payload = json.loads(summary.read_text())
        rows = [[n, d, 0.5] for n in lengths for d in (0.0, 0.5)]
        payload["tables"] = {"lengen/acc_by_depth": {"columns": ["length", "depth", "acc"], "rows": rows}}
        summary.write_text(json.dumps(payload))
    fig = text_report.recall_depth(group_runs(find_summaries([runs])))
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in panels] == ["alibi", "learned"]
    fig.canvas.draw()
    assert [t.get_text() for t in panels[0].get_yticklabels()] == ["16", "32"]
    for ax in panels:
        assert ax.images[0].get_array().shape == (2, 2)  # rows: lengths 16, 32; columns: depths 0.0, 0.5
    assert ax.images[0].get_array().mask[1].all()  # `learned` has no 32-token row: blank


def test_report_states_whether_each_expectation_held_with_params_and_step_time(tmp_path):
    runs = tmp_path / "runs"
    expect = ["alibi: lengen/loss@4x <= 1.05 * lengen/loss@1x", "rope: lengen/loss@4x < alibi:lengen/loss@4x"]
    for encoder, loss4 in (("alibi", 1.5), ("rope", 2.5)):
        for seed in (0, 1):
            run = fake_summary(runs, encoder, seed, {"lengen/loss@1x": 1.5, "lengen/loss@4x": loss4})
            payload = json.loads((run / "summary.json").read_text())
            payload["config"]["expect"] = expect
            payload["metrics"]["perf/train_step_ms"] = 20.0 + seed
            (run / "summary.json").write_text(json.dumps(payload))
    text = build_report([runs], tmp_path / "reports").read_text()
    assert "**Expected outcome: did not hold** (2 of 2 checks made)." in text
    assert f"| `{expect[0]}` | `alibi` | 1.5000 <= 1.5750 | yes |" in text
    assert f"| `{expect[1]}` | `rope` | 2.5000 < 1.5000 | **no** |" in text
    alibi_row = next(line for line in text.splitlines() if line.startswith("| `alibi` |"))
    assert alibi_row.endswith("| 1,000 | 20.5 |")  # parameter count and mean step time (ms)


def test_expectations_are_the_newest_runs_or_the_ones_given_not_a_reused_runs_old_list(tmp_path):
    """A compare reuses a finished run whose config carries the YAML's expectations of its day: the report
    checks those of the newest run by default, and the experiment's current ones when the caller gives them."""
    runs = tmp_path / "runs"
    old, new = ["alibi: lengen/loss@1x < 9"], ["alibi: lengen/loss@1x < 9", "rope: lengen/loss@1x < 1"]
    for encoder, expect, created in (("alibi", old, "2026-01-01T00:00:00"), ("rope", new, "2026-02-01T00:00:00")):
        run = fake_summary(runs, encoder, 0, {"lengen/loss@1x": 1.5})
        payload = json.loads((run / "summary.json").read_text())
        payload["config"]["expect"], payload["created"] = expect, created
        (run / "summary.json").write_text(json.dumps(payload))
    text = build_report([runs], tmp_path / "reports").read_text()
    assert f"| `{new[1]}` | `rope` | 1.5000 < 1.0000 | **no** |" in text
    given = build_report([runs], tmp_path / "reports", expect={None: old}).read_text()
    assert f"`{new[1]}`" not in given and f"| `{old[0]}` | `alibi` |" in given


def test_variants_run_every_encoder_once_each_and_label_the_report(tmp_path):
    """compare_variants: the grid is encoder x variant x seed; reports label groups <encoder>/<variant> and
    check expectations that name them."""

    grid = plan("text", None, 2, ["experiment=randomized_positions"])
    labels = [label for label, _, _ in grid]
    assert labels == [
        f"{e}/{v}" for e in ("learned", "sinusoidal", "rope") for v in ("plain", "randomized") for _ in "ss"
    ]
    randomized = [cfg for label, _, cfg in grid if label.endswith("/randomized")]
    assert {cfg.data.random_positions for cfg in randomized} == {256} and {cfg.variant for cfg in randomized} == {
        "randomized"
    }
    assert all(cfg.data.random_positions is None for label, _, cfg in grid if label.endswith("/plain"))
    assert len({cfg.run.name for _, _, cfg in grid}) == len(grid)

    runs = tmp_path / "runs"
    for label, seed, cfg in grid:
        if not label.startswith("rope/"):
            continue
        acc = {"rope/plain": 0.3, "rope/randomized": 0.6}[label]
        run = runs / "text" / cfg.run.name
        run.mkdir(parents=True)
        payload = {"kind": "train", "modality": "text", "encoder": "rope", "seed": seed, "config": to_dict(cfg)}
        payload |= {"metrics": {"lengen/token_acc@2x": acc + seed / 100}, "num_params": 1, "run_dir": str(run)}
        (run / "summary.json").write_text(json.dumps(payload))
    groups = group_runs(find_summaries([runs]))
    assert [g.label for g in groups] == ["rope/plain", "rope/randomized"]
    held = {(text, label): ok for text, label, ok, _ in check_expectations(groups)}
    assert held[("rope/randomized: lengen/token_acc@2x > rope/plain:lengen/token_acc@2x", "rope/randomized")]
    assert ("rope/randomized: lengen/token_acc@2x > rope/plain:lengen/token_acc@2x", "rope/plain") not in held


def test_an_encoders_own_variant_runs_beside_its_default_and_only_for_it():
    """``<encoder>/<name>`` in compare_variants: that encoder runs once more with the variant's overrides (its
    own label, run name and W&B group); the other encoders run once, unlabelled."""
    from poslab.track.loggers import wandb_group

    grid = plan("video", ["rope", "mrope", "hope"], 1, ["experiment=motion"])
    by_label = {label: cfg for label, _, cfg in grid}
    assert list(by_label) == ["rope", "mrope", "mrope/interleaved", "hope", "hope/scaled"]
    assert (by_label["mrope"].encoder.interleaved, by_label["mrope/interleaved"].encoder.interleaved) == (False, True)
    assert by_label["mrope/interleaved"].encoder.base == by_label["mrope"].encoder.base == 100.0  # encoder_options
    assert list(by_label["hope/scaled"].data.temporal_scales) == [0.5, 0.75, 1.0, 1.25, 1.5]
    assert not by_label["hope"].data.temporal_scales and by_label["hope"].variant is None
    assert by_label["mrope/interleaved"].run.name.startswith("mrope-interleaved-s0-")
    assert wandb_group(by_label["mrope/interleaved"]) == "video-classification-motion-mrope-interleaved"


@pytest.mark.parametrize(
    ("variants", "error"),
    [
        ("{mrop/interleaved: []}", "compare_variants 'mrop/interleaved' names no encoder 'mrop' of this modality"),
        ("{rope/: []}", "an encoder's own variant is '<encoder>/<name>'"),
        ("{rope/a/b: []}", "an encoder's own variant is '<encoder>/<name>'"),
        ("{fast: [], rope/fast: []}", "'fast' is a variant of every encoder already"),
    ],
)
def test_a_bad_own_variant_is_one_line(variants, error):
    with pytest.raises(ConfigError, match=error.replace("(", r"\(")):
        plan("video", ["rope"], 1, [f"compare_variants={variants}"])


def test_a_broken_or_incomplete_summary_is_skipped_with_a_line_naming_it(tmp_path):
    runs = tmp_path / "runs"
    good = fake_summary(runs, "alibi", 0, {"val/loss": 1.0})
    (runs / "text" / "truncated").mkdir(parents=True)
    (runs / "text" / "truncated" / "summary.json").write_text('{"kind": "train", "modal')
    (runs / "text" / "old").mkdir()
    (runs / "text" / "old" / "summary.json").write_text(json.dumps({"kind": "train", "encoder": "rope"}))
    lines: list[str] = []
    found = find_summaries([runs], warn=lines.append)
    assert [s.path for s in found] == [str(good / "summary.json")]
    assert sorted(lines) == [
        f"poslab: skipping {runs / 'text' / 'old' / 'summary.json'}: no modality, seed, config, metrics",
        f"poslab: skipping {runs / 'text' / 'truncated' / 'summary.json'}: unreadable (JSONDecodeError)",
    ]
    assert build_report([runs], tmp_path / "reports").exists()  # the report is built from the rest


def test_two_reports_in_the_same_second_get_their_own_folders(tmp_path):
    from poslab.study.report import publish

    done = []
    for n in (1, 2):
        (tmp_path / f".b{n}").mkdir()
        (tmp_path / f".b{n}" / "report.md").write_text(str(n))
        done.append(publish(tmp_path / f".b{n}", tmp_path, "text-20261130-120000"))
    assert [d.name for d in done] == ["text-20261130-120000", "text-20261130-120000-2"]
    assert [(d / "report.md").read_text() for d in done] == ["1", "2"]


@pytest.mark.parametrize("fault", ["full disk", "signal"])
def test_a_report_that_cannot_finish_leaves_nothing(tmp_path, monkeypatch, fault):
    """A figure meets a full disk or a signal: no report folder, no half-built one, and the next report is
    whole."""
    import errno

    from poslab.errors import RunInterrupted
    from poslab.track import plots

    runs = tmp_path / "runs"
    for seed in (0, 1):
        fake_summary(runs, "alibi", seed, {"val/loss": 1.5, "lengen/loss@1x": 1.5, "lengen/loss@2x": 1.4})
    real, saved = plots.save_figure, []

    def failing(fig, path):
        saved.append(path)
        if len(saved) == 1:
            raise OSError(errno.ENOSPC, "No space left on device", str(path)) if fault == "full disk" else (
                RunInterrupted("interrupted by SIGINT", 2))  # fmt: skip
        real(fig, path)

    monkeypatch.setattr(plots, "save_figure", failing)
    with pytest.raises((OSError, RunInterrupted)):
        build_report([runs], tmp_path / "reports")
    assert len(saved) == 1 and list((tmp_path / "reports").iterdir()) == []
    monkeypatch.undo()
    path = build_report([runs], tmp_path / "reports")
    assert [p.name for p in (tmp_path / "reports").iterdir()] == [path.parent.name]
    assert path.is_file() and list(path.parent.glob("*.png"))
    assert path.parent.stat().st_mode & 0o777 == 0o777 & ~umask()  # as a plain mkdir makes it


def test_an_interrupted_report_or_sweep_says_nothing_was_written_and_how_to_run_it_again(tmp_path, monkeypatch, capsys):
    from poslab.cli import main
    from poslab.errors import RunInterrupted

    def interrupted(*args, **kwargs):
        raise RunInterrupted("interrupted by SIGINT", 2)

    monkeypatch.setattr("poslab.cli.build_report", interrupted)
    monkeypatch.setattr("poslab.study.sweep.sweep_and_left_out", interrupted)
    for argv in (["report", str(tmp_path)], ["sweep", "modality=vision"]):
        assert main(argv) == 130
        assert capsys.readouterr().err == (
            f"poslab: interrupted by SIGINT; nothing was written: run the same `poslab {argv[0]}` command again\n"
        )
    monkeypatch.setattr("poslab.cli._dispatch", interrupted)  # `poslab` alone, signalled while it prints help
    assert main([]) == 130 and capsys.readouterr().err == "poslab: interrupted by SIGINT\n"


def test_compare_encoders_all_takes_every_fitting_encoder_and_more_after_it(monkeypatch):
    from poslab.encoders import available_encoders
    from poslab.study.compare import expand_encoders, plan

    assert expand_encoders(["all", "rope+cyclic", "none"], ["none", "rope"]) == ["none", "rope", "rope+cyclic"]
    labels = [label for label, _, _ in plan("vision", ["none", "all"], 1, ["experiment=null"])]
    assert labels == ["none", *(e for e in available_encoders("vision") if e != "none")]  # each once, in order
    monkeypatch.setattr("poslab.study.compare.available_encoders", lambda modality=None: ["none", "sincos2d"])
    assert [label for label, _, _ in plan("vision", ["all"], 1, ["experiment=null"])] == ["none", "sincos2d"]
    in_yaml = ["experiment=null", "compare_encoders=all"]  # an experiment's `compare_encoders: all`
    assert [label for label, _, _ in plan("vision", None, 1, in_yaml)] == ["none", "sincos2d"]


def test_a_report_lists_every_check_it_could_not_make_and_judges_only_those_it_made(tmp_path):
    """Expectations about encoders the comparison did not run, and one whose metric no run reported, are listed
    with why; the verdict counts the one check made, and says how many of the stated ones that is."""
    runs = tmp_path / "runs"
    expect = [
        "alibi: lengen/loss@4x <= 1.05 * lengen/loss@1x",
        "fire: lengen/loss@4x <= 1.05 * lengen/loss@1x",
        "rope-none: lengen/loss@4x < 3",
        "alibi: lengen/acc@4x > 0.5",
    ]
    run = fake_summary(runs, "alibi", 0, {"lengen/loss@1x": 1.5, "lengen/loss@4x": 1.5})
    payload = json.loads((run / "summary.json").read_text())
    payload["config"]["expect"] = expect
    (run / "summary.json").write_text(json.dumps(payload))
    text = build_report([runs], tmp_path / "reports").read_text()
    assert "**Expected outcome: held** (1 of 4 checks made)." in text
    assert f"| `{expect[0]}` | `alibi` | 1.5000 <= 1.5750 | yes |" in text
    assert f"- `{expect[1]}`: no run of fire here" in text
    assert f"- `{expect[2]}`: no run of rope-none here" in text
    assert f"- `{expect[3]}` (`alibi`): lengen/acc@4x not reported" in text
    rows = check_expectations(group_runs(find_summaries([runs])), expect)
    assert [held for *_, held, _ in rows] == [True, None, None, None]
    nothing = build_report([runs], tmp_path / "reports", expect={None: expect[1:3]}).read_text()
    assert "**Expected outcome: not checked** (0 of 2 checks made)." in nothing
