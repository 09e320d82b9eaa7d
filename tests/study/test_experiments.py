"""Experiment configs, their stated expectations, the quadrant task and the resolution probe."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from poslab.config.composition import compose
from poslab.config.files import config_dir
from poslab.errors import ConfigError
from poslab.modalities.vision.data import VisionDataModule, place_in_quadrants
from poslab.run.train import train
from poslab.study.expectations import Expectation

EXPERIMENTS = sorted(p.stem for p in (config_dir() / "experiment").glob("*.yaml"))
#: Each experiment, and with each dataset its ``per_data`` gives its own values (TSLib's files): ``data=<name>``.
SETTINGS = [
    (name, *([f"data={data}"] if data else []))
    for name in EXPERIMENTS
    for data in [None, *(OmegaConf.load(config_dir() / "experiment" / f"{name}.yaml").get("per_data") or {})]
]


@pytest.mark.parametrize("setting", SETTINGS, ids=" ".join)
def test_every_experiment_composes_and_its_expectations_parse(setting):
    name, *data = setting
    cfg = compose([f"experiment={name}", *data])
    assert cfg.experiment == name
    for text in cfg.expect:
        Expectation.parse(text)


@pytest.mark.parametrize("setting", SETTINGS, ids=" ".join)
def test_every_expectation_names_runs_of_its_experiments_grid(setting):
    """An encoder or variant an expectation names (either side, or excluded) is a label of the grid, or an
    encoder with variants there (also as ``<encoder>/mean``): a typo would leave the expectation unchecked in
    every report."""
    from poslab.study.compare import plan

    name, *data = setting
    cfg = compose([f"experiment={name}", *data])
    if not cfg.expect:
        pytest.skip(f"{name} states no expectation")
    labels = {label for label, _, _ in plan(cfg.modality, None, 1, [f"experiment={name}", *data])}
    with_variants = {label.split("/")[0] for label in labels if "/" in label}
    known = labels | {label.split("/")[0] for label in labels} | {f"{e}/mean" for e in with_variants}
    for text in cfg.expect:
        e = Expectation.parse(text)
        assert not e.over_variants or with_variants, f"{text!r} averages variants; {name} has none"
        named = [*e.encoders, *e.excluded]
        if e.rhs_metric and ":" in e.rhs_metric:
            named.append(e.rhs_metric.split(":", 1)[0])
        assert set(named) <= known, f"{text!r} names {sorted(set(named) - known)}, not in {sorted(labels)}"


def test_a_sweep_leaves_an_encoders_own_variants_out_and_says_so(capsys):
    """A grid sweep sets one value per parameter: ``rnope/swa`` (rnope with other options) is not one of them."""
    from poslab.study.sweep import main, sweep_and_left_out

    config, left_out = sweep_and_left_out("text", None, 1, ["experiment=needle"])
    assert config["parameters"]["encoder"]["values"] == ["none", "sinusoidal", "rope", "alibi", "t5", "rnope"]
    assert left_out == ["rnope/swa"]
    assert main(["modality=text", "experiment=needle", "seeds=1"]) == 0
    assert "own variants rnope/swa are left out" in capsys.readouterr().err


@pytest.mark.slow
def test_a_sweep_is_the_comparison_grid_with_the_tasks_metric(capsys):
    """Derived from the experiment and the registry: `all` takes every fitting encoder, a new one with no edit."""
    from poslab.cli import main
    from poslab.encoders import available_encoders
    from poslab.study.sweep import sweep_config

    vision = sweep_config("vision")
    resolution = ["none", "sincos2d", "learned2d", "rope2d", "rope2d_mixed", "liere", "rope2d_golden", "comrope"]
    assert vision["parameters"]["encoder"]["values"] == resolution  # the experiment's grid
    assert sweep_config("vision", ["all"])["parameters"]["encoder"]["values"] == available_encoders("vision")
    assert vision["parameters"]["experiment"] == {"value": "resolution"}
    assert vision["parameters"]["seed"]["values"] == [0, 1, 2]
    assert vision["metric"] == {"name": "val/acc_best", "goal": "maximize"}  # a plain number in W&B's summary
    assert vision["command"] == ["${env}", "${interpreter}", "-m", "poslab", "train", "${args_no_hyphens}"]
    assert vision["project"] == "poslab" and "entity" not in vision
    assert sweep_config("vision", overrides=["logger.entity=lab"])["entity"] == "lab"
    text = sweep_config("text", ["rope", "alibi"], 2, ["trainer.max_steps=100", "optim.lr=1e-5", "logger.notes=123"])
    assert text["parameters"]["encoder"]["values"] == ["rope", "alibi"]
    assert text["metric"] == {"name": "val/loss_best", "goal": "minimize"}
    assert text["parameters"]["trainer.max_steps"] == {"value": 100}  # typed as the config types it
    assert text["parameters"]["optim.lr"] == {"value": 1e-5}
    assert text["parameters"]["logger.notes"] == {"value": "123"}  # a string that would read back as a number
    assert text["parameters"]["seed"]["values"] == [0, 1]
    assert main(["sweep", "modality=timeseries"]) == 0
    printed = OmegaConf.create(capsys.readouterr().out)
    assert printed.parameters.modality.value == "timeseries" and printed.metric.name == "val/mse_best"
    assert main(["sweep", "modality=text", "experiment=randomized_positions"]) == 2
    assert "compares variants" in capsys.readouterr().err


def test_expectations_check_numbers_ratios_and_other_encoders():
    e = Expectation.parse("alibi: lengen/loss@4x <= 1.05 * lengen/loss@1x")
    assert e.applies_to("alibi") and not e.applies_to("rope")
    assert e.check({"lengen/loss@4x": 1.6, "lengen/loss@1x": 1.59})[0] is True
    assert e.check({"lengen/loss@4x": 1.8, "lengen/loss@1x": 1.59})[0] is False
    assert e.check({"lengen/loss@1x": 1.59}) == (None, "lengen/loss@4x not reported")
    assert e.check({"lengen/loss@4x": 1.59}) == (None, "lengen/loss@1x not reported")
    every_but_none = Expectation.parse("*-none: test/acc >= 0.95")
    assert every_but_none.applies_to("rope2d") and not every_but_none.applies_to("none")
    variant = Expectation.parse("rope/randomized: lengen/acc@2x > rope/plain:lengen/acc@2x")
    assert variant.applies_to("rope/randomized") and not variant.applies_to("rope/plain")
    assert variant.check({"lengen/acc@2x": 0.5}, {"rope/plain": {"lengen/acc@2x": 0.2}})[0] is True
    assert every_but_none.applies_to("rope/plain") and not every_but_none.applies_to("none/randomized")
    assert Expectation.parse("rope: test/acc > 0").applies_to("rope/randomized")  # an encoder covers its variants
    but_one = Expectation.parse("*-rnope/swa: lengen/acc@8x < 0.5 * lengen/acc@1x")  # all but one variant
    assert but_one.applies_to("rnope") and not but_one.applies_to("rnope/swa")
    cross = Expectation.parse("cyclic: test/mse < rope:test/mse")
    assert cross.check({"test/mse": 0.1}, {"rope": {"test/mse": 0.2}})[0] is True
    best = Expectation.parse("best */mean: test/mse <= 1.05 * 0.469")  # within 5 % of a published number
    assert best.best and best.over_variants and best.rhs_metric is None and best.constant == pytest.approx(0.49245)
    assert best.applies_to("rope/mean") and not best.applies_to("rope/h96") and not best.applies_to("rope")
    assert best.check({"test/mse": 0.49})[0] is True and best.check({"test/mse": 0.4925})[0] is False
    assert best.margin({"test/mse": 0.48}) == pytest.approx(0.01245)
    assert (
        Expectation.parse("rope: test/mse > 1.5 * none:test/mse").margin({"test/mse": 3}, {"none": {"test/mse": 1}})
        == 1.5
    )
    with pytest.raises(ConfigError, match="is not"):
        Expectation.parse("alibi loss is small")


def test_quadrant_canvases_put_the_digit_in_the_labelled_quadrant():
    digits = torch.ones(8, 1, 4, 4, dtype=torch.uint8)
    canvas, quadrant = place_in_quadrants(digits, seed=0)
    assert canvas.shape == (8, 1, 8, 8)
    for image, q in zip(canvas, quadrant, strict=True):
        row, col = divmod(int(q), 2)
        assert image[0, row * 4 : row * 4 + 4, col * 4 : col * 4 + 4].all()
        assert image.sum() == 16  # the rest is blank


def test_quadrant_data_module_has_four_classes_on_a_double_canvas(data_root):
    dm = VisionDataModule(compose(["experiment=quadrant", f"data.root={data_root}"]).data)
    dm.setup()
    assert dm.image_size == 56 and dm.grid == (8, 8) and dm.num_classes == 4
    counts = torch.bincount(dm.splits["test"].tensors[1], minlength=4)
    assert counts.min() > 80  # all quadrants, roughly balanced over 500 test images


def test_resolution_probe_reports_raw_and_rescaled_accuracy(tiny):
    summary = train(compose([*tiny, "encoder=learned2d", "eval.image_sizes=[56]"]))
    metrics = summary["metrics"]
    assert "resolution/acc@56/rescaled" in metrics and "resolution/acc@56/raw" not in metrics
    notes = dict(summary["tables"]["resolution/notes"]["rows"])
    assert "table is 4x4" in notes["resolution/acc@56/raw"]
    rows = summary["tables"]["resolution/acc"]["rows"]
    assert [r[:2] for r in rows] == [[56, "raw"], [56, "rescaled"]]


@pytest.mark.slow
def test_a_sweep_file_loads_as_wandb_loads_it_and_an_agent_elsewhere_runs_its_command(tmp_path, capsys):
    """What ``wandb sweep`` reads (its own loader), and the command its agent builds with W&B's own argument
    formatting: ``/usr/bin/env python -m poslab train key=value …`` with the ``python`` of the agent's PATH
    (no path of this machine in the file), values typed, and the trials tagged for ``poslab dashboard``."""
    from wandb.sdk.launch.sweeps.utils import create_sweep_command_args, load_sweep_config

    from poslab.cli import main

    assert main(["sweep", "modality=vision", "logger.project=mine", "trainer.max_epochs=2", "optim.lr=1e-5"]) == 0
    out, err = capsys.readouterr()
    path = tmp_path / "sweep.yaml"
    path.write_text(out)
    assert sys.executable not in out and str(Path.cwd()) not in out
    sweep_id = re.search(r"tagged compare:(sweep-\S+);", err).group(1)
    config = load_sweep_config(str(path))
    assert config["project"] == "mine" and config["method"] == "grid" and config["program"] == "poslab"
    point = {k: {"value": v.get("value", (v.get("values") or [None])[-1])} for k, v in config["parameters"].items()}
    macros = create_sweep_command_args({"args": point}) | {"env": ["/usr/bin/env"], "interpreter": ["python"]}
    command = [a for c in config["command"] for a in macros.get(c[2:-1], [c])]  # as wandb's agent replaces them
    assert command[:5] == ["/usr/bin/env", "python", "-m", "poslab", "train"]
    agent_path = f"{Path(sys.executable).parent}:/usr/bin:/bin"  # the agent's environment, activated
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PATH")} | {"PATH": agent_path}
    out = subprocess.run([*command[:5], "--print-config", *command[5:]], capture_output=True, text=True, env=env,
                         timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    printed = OmegaConf.create(out.stdout)
    assert printed.experiment == "resolution" and printed.encoder.name == point["encoder"]["value"]
    assert printed.logger.project == "mine" and f"compare:{sweep_id}" in printed.logger.tags
    assert printed.trainer.max_epochs == 2 and printed.optim.lr == 1e-5
