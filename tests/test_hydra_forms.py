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
