"""train(cfg) / evaluate(ckpt) end to end on tiny CPU configs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from poslab.config.composition import compose
from poslab.encoders import available_encoders
from poslab.errors import DataError, PoslabError
from poslab.modalities import available_modalities
from poslab.modalities.vision.sources import SOURCES
from poslab.run.train import evaluate, train
from poslab.track.summary import SUMMARY_KEYS
from tests.conftest import tiny_overrides


@pytest.mark.parametrize("encoder", available_encoders("vision"))
def test_every_vision_encoder_trains_a_few_steps(tiny, encoder):
    summary = train(compose([*tiny, f"encoder={encoder}"]))
    metrics = summary["metrics"]
    assert summary["encoder"] == encoder
    assert 0.0 <= metrics["test/acc"] <= 1.0 and metrics["train/loss"] > 0
    assert Path(summary["run_dir"], "summary.json").exists()


def test_a_run_prints_no_advertisement_for_a_hosted_logger(tiny, caplog):
    """Lightning's tip for its hosted logger is dropped; its other messages (checkpoint restored, …) stay."""
    with caplog.at_level("INFO"):
        train(compose(tiny))
    messages = [r.getMessage() for r in caplog.records]
    assert any("Restoring states from the checkpoint" in m for m in messages)
    assert not [m for m in messages if "litlogger" in m.lower()]


@pytest.mark.parametrize("modality", available_modalities())
def test_every_modality_logs_the_training_loss_per_step_as_train_loss(request, modality):
    """One key scheme in every modality, so W&B charts line up: ``train/loss`` per step, nothing suffixed."""
    overrides = [o for o in tiny_overrides(request, modality) if o != "logger=none"]
    summary = train(compose([*overrides, "logger=csv", "trainer.log_every_n_steps=1"]))
    logged = (Path(summary["run_dir"]) / "csv" / "metrics.csv").read_text().splitlines()[0].split(",")
    for keys in (summary["metrics"], summary["history"], logged):
        assert "train/loss" in keys
        assert not [k for k in keys if k.startswith("train/loss_")], sorted(keys)
    assert len(summary["history"]["train/loss"]) > 1  # a point per logged step, not per epoch


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, data_root):
    root = tmp_path_factory.mktemp("runs")
    overrides = [
        "logger=csv",
        f"run.root={root}",
        f"data.root={data_root}",
        "model.dim=32",
        "model.depth=1",
        "model.num_heads=2",
        "trainer.max_epochs=2",
        "trainer.limit_train_batches=4",
        "trainer.limit_val_batches=1",
        "trainer.enable_progress_bar=false",
        "encoder=learned2d",
    ]
    return train(compose(overrides))


def test_summary_has_the_documented_keys(finished_run):
    run_dir = Path(finished_run["run_dir"])
    on_disk = json.loads((run_dir / "summary.json").read_text())
    assert set(SUMMARY_KEYS) <= set(on_disk)
    assert on_disk["kind"] == "train"
    assert on_disk["config"]["encoder"]["name"] == "learned2d"
    for key in ("test/acc", "test/loss", "val/acc", "val/loss", "train/loss", "val/acc_best", "perf/train_step_ms"):
        assert isinstance(on_disk["metrics"][key], float), key
    assert on_disk["wall_time_s"] > 0 and on_disk["num_params"] > 0
    assert on_disk["wandb"] == {"mode": None, "dir": None, "url": None, "path": None, "sync_command": None}
    rows = on_disk["tables"]["test/acc_per_class"]["rows"]
    assert [r[0] for r in rows] == [str(d) for d in range(10)]
    history = on_disk["history"]  # training curves for reports, [step, value] pairs
    for key in ("train/loss", "val/loss", "val/acc"):
        steps = [step for step, _ in history[key]]
        assert steps and steps == sorted(set(steps)), key
    assert history["val/acc"][-1][1] == pytest.approx(on_disk["metrics"]["val/acc"])


def test_run_directory_holds_checkpoints_figures_and_logs(finished_run):
    run_dir = Path(finished_run["run_dir"])
    assert run_dir.parent.name == "vision"
    assert finished_run["checkpoints"] == {"best": "checkpoints/best.ckpt", "last": "checkpoints/last.ckpt"}
    for rel in (*finished_run["checkpoints"].values(), *finished_run["figures"].values()):
        assert (run_dir / rel).stat().st_size > 0
    assert set(finished_run["figures"]) == {"encoder/position_similarity", "test/acc_per_class"}
    assert (run_dir / "csv" / "metrics.csv").exists()


def test_checkpoints_load_with_weights_only(finished_run):
    ckpt = torch.load(Path(finished_run["run_dir"]) / "checkpoints" / "best.ckpt", weights_only=True)
    assert ckpt["hyper_parameters"]["cfg"]["encoder"]["name"] == "learned2d"
    assert ckpt["hyper_parameters"]["context"]["grid_size"] == (4, 4)


def test_eval_reproduces_the_test_accuracy(finished_run):
    ckpt = Path(finished_run["run_dir"]) / "checkpoints" / "best.ckpt"
    summary = evaluate(ckpt, ["logger=none", "trainer.enable_progress_bar=false"])
    assert summary["kind"] == "eval"
    assert summary["metrics"]["test/acc"] == pytest.approx(finished_run["metrics"]["test/acc"], abs=1e-6)
    assert Path(summary["run_dir"]).parent == Path(finished_run["run_dir"]) / "eval"
    assert Path(summary["run_dir"], "summary.json").exists()


def test_every_eval_gets_its_own_directory(finished_run, tmp_path):
    """Two evaluations of one checkpoint (another image size, say) never overwrite each other; a name given
    twice is refused."""
    checkpoint = torch.load(Path(finished_run["run_dir"]) / "checkpoints" / "best.ckpt", weights_only=True)
    checkpoint["hyper_parameters"]["cfg"]["run"]["name"] = "named"  # as compare names its runs
    ckpt = tmp_path / "named" / "checkpoints" / "best.ckpt"
    ckpt.parent.mkdir(parents=True)
    torch.save(checkpoint, ckpt)
    quiet = ["logger=none", "trainer.enable_progress_bar=false"]
    first, second = evaluate(ckpt, quiet), evaluate(ckpt, [*quiet, "data.image_size=56"])
    assert first["run_dir"] != second["run_dir"]
    assert all(Path(s["run_dir"], "summary.json").exists() for s in (first, second))
    evaluate(ckpt, [*quiet, "run.name=probe"])
    with pytest.raises(PoslabError, match="already holds an evaluation; choose another run.name"):
        evaluate(ckpt, [*quiet, "run.name=probe"])


def test_checkpoints_carry_their_sha256_and_a_changed_file_is_refused(finished_run, tmp_path):
    from poslab.files import file_sha256

    run_dir = Path(finished_run["run_dir"])
    for key, rel in finished_run["checkpoints"].items():
        digest = finished_run["checkpoint_sha256"][key]
        assert digest == file_sha256(run_dir / rel) == (run_dir / f"{rel}.sha256").read_text().split()[0]
    copy = tmp_path / "run" / "checkpoints"
    copy.mkdir(parents=True)
    for name in ("best.ckpt", "best.ckpt.sha256"):
        (copy / name).write_bytes((run_dir / "checkpoints" / name).read_bytes())
    data = bytearray((copy / "best.ckpt").read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte: torch may still load it
    (copy / "best.ckpt").write_bytes(bytes(data))
    with pytest.raises(PoslabError, match="does not match the SHA-256 recorded when it was saved"):
        evaluate(copy / "best.ckpt", ["logger=none"])


def test_an_empty_or_mismatched_checkpoint_is_one_line(finished_run, tmp_path, capsys):
    from poslab.cli import main

    empty = tmp_path / "empty.ckpt"
    empty.write_bytes(b"")
    assert main(["eval", f"ckpt={empty}", "logger=none"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"poslab: error: cannot read checkpoint {empty}: ") and err.count("\n") == 1
    checkpoint = torch.load(Path(finished_run["run_dir"]) / "checkpoints" / "best.ckpt", weights_only=True)
    name = next(k for k in checkpoint["state_dict"] if k.endswith("head.weight"))
    checkpoint["state_dict"][name] = torch.zeros(3, 3)
    wrong = tmp_path / "run" / "checkpoints" / "wrong.ckpt"
    wrong.parent.mkdir(parents=True)
    torch.save(checkpoint, wrong)
    assert main(["eval", f"ckpt={wrong}", "logger=none"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"poslab: error: cannot rebuild the model from checkpoint {wrong}: ") and err.count("\n") == 1


def test_eval_at_a_larger_image_resamples_learned_positions(finished_run):
    ckpt = Path(finished_run["run_dir"]) / "checkpoints" / "best.ckpt"
    summary = evaluate(ckpt, ["logger=none", "data.image_size=56", "trainer.enable_progress_bar=false"])
    assert summary["config"]["data"]["image_size"] == 56
    assert 0.0 <= summary["metrics"]["test/acc"] <= 1.0


def test_eval_with_raw_indices_past_a_learned_table_fails_cleanly(finished_run):
    ckpt = Path(finished_run["run_dir"]) / "checkpoints" / "best.ckpt"
    eval_dir = Path(finished_run["run_dir"]) / "eval"
    before = set(eval_dir.iterdir()) if eval_dir.exists() else set()
    with pytest.raises(PoslabError, match="table is 4x4"):
        evaluate(ckpt, ["logger=none", "data.image_size=56", "data.coords=raw", "trainer.enable_progress_bar=false"])
    after = set(eval_dir.iterdir()) if eval_dir.exists() else set()
    assert after == before  # nothing half-written left behind


def test_relative_run_root_works(tiny, tmp_path, monkeypatch):
    """`make train` uses run.root=runs, relative to the working directory."""
    monkeypatch.chdir(tmp_path)
    overrides = [o for o in tiny if not o.startswith("run.root=")]
    summary = train(compose([*overrides, "run.root=rel-runs", "run.name=rel"]))
    assert Path(summary["run_dir"]) == tmp_path / "rel-runs" / "vision" / "rel"
    assert (tmp_path / "rel-runs" / "vision" / "rel" / summary["checkpoints"]["best"]).exists()
    again = evaluate(
        Path("rel-runs/vision/rel/checkpoints/best.ckpt"), ["logger=none", "trainer.enable_progress_bar=false"]
    )
    assert Path(again["run_dir"]).parent == tmp_path / "rel-runs" / "vision" / "rel" / "eval"


def test_bad_encoder_option_writes_nothing(tiny, tmp_path):
    with pytest.raises(PoslabError):
        train(compose([*tiny, "encoder=sincos2d", "model.dim=30", "model.num_heads=3"]))
    assert not (tmp_path / "runs").exists()


def test_seed_makes_runs_repeatable(tiny):
    a = train(compose([*tiny, "encoder=rope2d_mixed", "run.name=a"]))
    b = train(compose([*tiny, "encoder=rope2d_mixed", "run.name=b"]))
    assert a["metrics"]["train/loss"] == pytest.approx(b["metrics"]["train/loss"], rel=1e-6)


def test_a_finished_run_name_is_not_overwritten(tiny):
    train(compose([*tiny, "run.name=once"]))
    with pytest.raises(PoslabError, match="already holds a finished run"):
        train(compose([*tiny, "run.name=once"]))


@pytest.mark.slow
def test_default_recipe_reaches_the_accuracy_target(tmp_path, data_root):
    """The project's target: `make train MODALITY=vision` reaches test/acc >= 0.96 (about 45 s here)."""
    summary = train(
        compose(["logger=none", f"run.root={tmp_path}", f"data.root={data_root}", "trainer.enable_progress_bar=false"])
    )
    assert summary["metrics"]["test/acc"] >= 0.96


@pytest.mark.slow
def test_vit_tiny_learns_cifar10_at_patch_4(tmp_path):
    """The road to DeiT-scale vision, at CPU size: DeiT-Ti's preset on CIFAR-10's 32-px images in 4-px patches
    (64 tokens) trains 300 steps of 64 images; the training loss falls and the test accuracy leaves chance (0.1).
    CIFAR-10 downloads (170 MB) into data/ once; a machine that has it not and cannot download it skips this."""
    root = Path(__file__).resolve().parents[2] / "data"
    try:
        SOURCES["cifar10"].load(root, True)
    except DataError as exc:
        pytest.skip(f"CIFAR-10 is not in {root} and cannot be downloaded here: {exc}")
    summary = train(compose([
        "model=vit-tiny", "data=cifar10", "data.patch_size=4", f"data.root={root}", "data.batch_size=64",
        "trainer.max_epochs=1", "trainer.limit_train_batches=300", "trainer.limit_val_batches=4",
        "logger=none", f"run.root={tmp_path}", "trainer.enable_progress_bar=false",
    ]))  # fmt: skip
    losses = [loss for _, loss in summary["history"]["train/loss"]]
    assert len(losses) >= 20 and sum(losses[-5:]) / 5 < 0.9 * sum(losses[:3]) / 3
    assert summary["metrics"]["test/acc"] >= 0.2


@pytest.mark.filterwarnings("error:Converting a tensor with requires_grad=True")  # the one line, nothing before it
def test_a_nan_loss_stops_the_run_naming_the_step_and_keeps_earlier_checkpoints(tiny, monkeypatch, capsys):
    from poslab.cli import main
    from poslab.modalities.vision.task import ImageClassifier

    original = ImageClassifier.training_step

    def poisoned(self, batch, batch_idx):
        loss = original(self, batch, batch_idx)
        return loss * float("nan") if self.global_step == 3 else loss

    monkeypatch.setattr(ImageClassifier, "training_step", poisoned)
    overrides = [*tiny, "trainer.max_epochs=2", "trainer.limit_train_batches=3", "run.checkpoint_every_n_steps=2"]
    assert main(["train", *overrides, "run.name=nan"]) == 2
    ours = [line for line in capsys.readouterr().err.splitlines() if line.startswith("poslab:")]
    assert len(ours) == 1 and ours[0].startswith("poslab: error: the training loss is nan at step 3;")
    run_dir = Path(next(o for o in tiny if o.startswith("run.root=")).split("=", 1)[1]) / "vision" / "nan"
    last = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)
    assert last["global_step"] == 2 and not (run_dir / "summary.json").exists()
    assert all(torch.isfinite(v).all() for v in last["state_dict"].values())


def test_each_run_starts_with_none_of_dynamos_graphs(tiny):
    """Runs in one process would add up the graphs of the one compiled FlexAttention past dynamo's recompile
    limit, after which it runs unfused: a graph compiled before a run is compiled again after it."""
    compiled = []

    def counting(gm, example_inputs):
        compiled.append(gm)
        return gm.forward

    doubled = torch.compile(lambda x: 2 * x, backend=counting)
    doubled(torch.ones(3))
    doubled(torch.ones(3))
    assert len(compiled) == 1
    train(compose(tiny))
    doubled(torch.ones(3))
    assert len(compiled) == 2
