"""What Hydra and LightningCLI users type: the forms that cost little work; the others say what to use."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from poslab.cli import main


def test_hydras_add_and_force_add_set_a_declared_key(capsys):
    assert main(["train", "+trainer.accumulate_grad_batches=2", "++seed=4", "--print-config"]) == 0
    printed = OmegaConf.create(capsys.readouterr().out)
    assert printed.trainer.accumulate_grad_batches == 2 and printed.seed == 4


def test_lightning_clis_dotted_flags_and_print_config(capsys):
    assert main(["train", "--trainer.max_epochs=7", "--print_config"]) == 0
    assert "  max_epochs: 7\n" in capsys.readouterr().out
    assert main(["train", "seed=5", "--cfg", "job"]) == 0
    assert "seed: 5\n" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("~callbacks", "'~callbacks': every key is declared and cannot be removed; set callbacks=VALUE"),
        ("hydra.run.dir=/x", "'hydra.run.dir' is a Hydra key; poslab's equivalent: run.root and run.name"),
        ("hydra.sweep.dir=/x", "poslab's equivalent: poslab compare (a grid of encoders x seeds) or poslab sweep"),
        ("ckpt_path=x.ckpt", "'ckpt_path' is LightningCLI's key; poslab's equivalent: resume=<run directory>"),
        ("seed_everything=3", "'seed_everything' is LightningCLI's key; poslab's equivalent: seed=<int>"),
    ],
)
def test_hydras_other_forms_are_one_line_naming_poslabs(override, message, capsys, tmp_path):
    assert main(["train", f"run.root={tmp_path}", override]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


@pytest.mark.parametrize("flag", ["-m", "--multirun"])
def test_hydras_multirun_is_one_line_naming_poslabs_grid(flag, capsys):
    assert main(["train", flag, "encoder=rope,alibi"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "-m / --multirun is Hydra's sweep; poslab runs a grid with `poslab compare" in err


@pytest.mark.parametrize(
    ("command", "nearest"),
    [("fit", "poslab train [key=value ...]"), ("validate", "poslab eval ckpt=<file>"), ("test", "poslab eval ckpt="),
     ("predict", "poslab generate ckpt=<file>")],
)  # fmt: skip
def test_lightning_clis_subcommands_name_poslabs_nearest(command, nearest, capsys):
    assert main([command, "trainer.max_epochs=1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"'poslab {command}' is LightningCLI's; poslab's nearest: {nearest}" in err


def test_a_config_file_is_a_yaml_of_overrides_and_the_command_line_wins(capsys, tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(
        "encoder: rope2d\nmodel:\n  dim: 48\n  depth: 3\ntrainer:\n  max_epochs: 4\nlogger:\n  tags: [a, b]\n"
    )
    assert main(["train", "--config", str(path), "model.depth=2", "--print-config"]) == 0
    printed = OmegaConf.create(capsys.readouterr().out)
    assert printed.encoder.name == "rope2d" and (printed.model.dim, printed.model.depth) == (48, 2)
    assert printed.trainer.max_epochs == 4 and list(printed.logger.tags) == ["a", "b"]
    assert main(["train", "model.depth=2", f"--config={path}", "--print-config"]) == 0  # the file after: it wins
    assert OmegaConf.create(capsys.readouterr().out).model.depth == 3


@pytest.mark.parametrize(
    "overrides",
    [["encoder=rope2d", "model.dim=48"], ["modality=text", "encoder=alibi", "data.context=64", "trainer=cpu"]],
)
def test_a_printed_config_given_back_as_a_config_file_is_the_same_config(overrides, capsys, tmp_path):
    """``poslab train --print-config … > run.yaml`` then ``poslab train --config run.yaml``: the same run."""
    assert main(["train", "--print-config", *overrides]) == 0
    printed = capsys.readouterr().out
    (tmp_path / "run.yaml").write_text(printed)
    assert main(["train", "--config", str(tmp_path / "run.yaml"), "--print-config"]) == 0
    assert capsys.readouterr().out == printed


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "no such file"), ("- a\n- b\n", "not a YAML mapping of overrides"), ("a: [\n", "not a YAML mapping")],
)
def test_a_bad_config_file_is_one_line(content, message, capsys, tmp_path):
    path = tmp_path / "bad.yaml"
    if content is not None:
        path.write_text(content)
    assert main(["train", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--config {path}: {message}" in err
