"""The command line: fast help, one-line errors with non-zero exits, print-config, a real run."""

from __future__ import annotations

import contextlib
import subprocess
import sys

import pytest
import torch

from poslab.cli import main
from poslab.encoders import available_encoders
from poslab.errors import PoslabError
from poslab.modalities import available_modalities
from tests.config.test_compose import steps_modalities


def test_help_imports_neither_lightning_nor_torchvision_nor_wandb():
    code = (
        "import sys, contextlib, io\n"
        "from poslab.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "    try: main(['--help'])\n"
        "    except SystemExit: pass\n"
        "assert 'poslab train' in out.getvalue()\n"
        "heavy = [m for m in ('lightning', 'torchvision', 'wandb', 'torch') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_comparison_of_an_experiment_takes_the_modality_its_defaults_name():
    from poslab.study.arguments import parse_grid_arguments

    grid = parse_grid_arguments(["seeds=1", "experiment=bpe_lengen", "encoders=rope"], "poslab compare")
    assert (grid.modality, grid.seeds, grid.encoders, grid.overrides) == (
        "text",
        1,
        ["rope"],
        ["experiment=bpe_lengen"],
    )
    assert parse_grid_arguments(["experiment=motion"], "poslab sweep").modality == "video"
    given = parse_grid_arguments(
        ["modality=vision", "encoders=[a,b]", "workers=2", "worker=1/2"], "x", ("workers", "worker")
    )
    assert (given.modality, given.encoders, given.extra) == ("vision", ["a", "b"], {"workers": 2, "worker": "1/2"})
    with pytest.raises(PoslabError, match=r"^poslab sweep needs modality=<name> \(or an experiment= whose"):
        parse_grid_arguments(["seeds=2"], "poslab sweep")
    for bad in ("encoders=[" + ",".join(["none"] * 10_000) + "]", "seeds=[1", "encoders={a: [}"):
        with pytest.raises(PoslabError, match=rf"^cannot parse the value of '{bad.split('=')[0]}': \S"):
            parse_grid_arguments(["modality=vision", bad], "poslab compare")  # hostile YAML: one line


@pytest.mark.parametrize("command", ["compare", "sweep"])
def test_compare_and_sweep_help_list_their_own_keys(capsys, command):
    with contextlib.suppress(SystemExit):
        assert main([command, "--help"]) == 0
    out = capsys.readouterr().out
    for key in ("modality=", "experiment=", "encoders=", "seeds=", "key=value"):
        assert f"\n  {key}" in out, key
    assert ("workers=" in out) == (command == "compare")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["train", "encoder=rop3"],
            "unknown encoder 'rop3' (did you mean 'rope2d'?); valid for vision: "
            + ", ".join(available_encoders("vision")),
        ),
        (
            ["train", "encoder=alibi"],
            f"encoder 'alibi' does not fit modality 'vision' (it reads positions.steps: it fits {steps_modalities()}); "
            "encoders for vision: " + ", ".join(available_encoders("vision")),
        ),
        (["train", "data.batchsize=3"], "unknown config key 'data.batchsize' (did you mean 'data.batch_size'?)"),
        (["train", "model.depth=deep"], "config key 'model.depth' expects int, got 'deep'"),
        (["train", "trainer=tpu"], "unknown trainer 'tpu' (did you mean 'gpu'?); valid: cpu, ddp, fsdp, gpu, gpu16"),
        (["eval"], "poslab eval needs exactly one ckpt=PATH"),
        (["eval", "ckpt=/nonexistent.ckpt"], "checkpoint /nonexistent.ckpt does not exist"),
        (["compare", "seeds=2"], "poslab compare needs modality=<name> (or an experiment= whose defaults name one)"),
    ],
)
def test_bad_input_is_one_line_and_a_nonzero_exit(capsys, argv, expected):
    code, out, err = run_cli(capsys, *argv)
    assert code == 2
    assert err.strip() == f"poslab: error: {expected}"


@pytest.mark.skipif(torch.cuda.is_available() or torch.backends.mps.is_available(), reason="a GPU is present")
@pytest.mark.parametrize("trainer", ["gpu", "ddp"])
def test_a_gpu_trainer_without_a_gpu_is_one_line_naming_what_is_present(capsys, tmp_path, trainer):
    code, _, err = run_cli(capsys, "train", f"trainer={trainer}", f"run.root={tmp_path}")
    assert code == 2
    assert err.startswith(f"poslab: error: trainer.accelerator=gpu (trainer={trainer}) but this machine has no GPU, "
                          "only: cpu; use trainer=cpu") and err.count("\n") == 1  # fmt: skip
    assert not list(tmp_path.iterdir())  # nothing written


def test_corrupt_checkpoint_is_a_clear_error(capsys, tmp_path):
    bad = tmp_path / "broken.ckpt"
    bad.write_bytes(b"definitely not a checkpoint")
    code, _, err = run_cli(capsys, "eval", f"ckpt={bad}")
    assert code == 2 and err.startswith(f"poslab: error: cannot read checkpoint {bad}") and err.count("\n") == 1


def test_print_config_shows_the_resolved_yaml(capsys):
    code, out, _ = run_cli(capsys, "train", "--print-config", "encoder=rope2d", "encoder.base=50")
    assert code == 0
    assert "name: rope2d" in out and "base: 50.0" in out and "defaults" not in out


def test_list_shows_encoders_and_their_hooks(capsys):
    code, out, _ = run_cli(capsys, "list")
    assert code == 0
    lines = dict(line.split(": ", 1) for line in out.strip().splitlines())
    assert set(lines) == set(available_modalities())
    assert "rope2d (rotate)" in lines["vision"] and "sincos2d (encode_input)" in lines["vision"]
    assert "alibi (attention_bias+relative_bias)" in lines["text"] and "rope (rotate)" in lines["text"]


def test_train_prints_the_sync_command_when_offline(capsys, tiny):
    argv = [o for o in tiny if not o.startswith("logger=")]
    code, out, _ = run_cli(capsys, "train", *argv, "logger.mode=offline")
    assert code == 0
    assert "W&B ran offline; to upload: wandb sync " in out
    assert "test/acc=" in out


@pytest.mark.slow
def test_console_script_is_installed():
    from pathlib import Path

    script = Path(sys.executable).with_name("poslab")
    out = subprocess.run([str(script), "train", "--print-config"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "modality: vision" in out.stdout
    bad = subprocess.run([str(script), "train", "encoder=nope"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "unknown encoder 'nope'" in bad.stderr


@pytest.mark.skipif(__import__("os").geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_run_root_is_one_line(capsys, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    code, _, err = run_cli(capsys, "train", f"run.root={locked}")
    assert code == 2 and err.startswith("poslab: error: cannot write ") and err.count("\n") == 1


def test_caches_and_summaries_are_readable_by_others(tmp_path):
    import os
    import stat

    from poslab.files import write_json_atomic

    mask = os.umask(0o022)
    try:
        path = write_json_atomic(tmp_path / "summary.json", {"a": 1})
    finally:
        os.umask(mask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_a_permission_error_is_one_line_naming_the_path(capsys, monkeypatch, tmp_path):
    """(As root, read-only folders are writable: the error is raised where the run directory is made.)"""
    import errno

    import poslab.run.run

    def refuse(cfg, name):
        raise PermissionError(errno.EACCES, "Permission denied", str(tmp_path / "runs"))

    monkeypatch.setattr(poslab.run.run, "create_run_dir", refuse)
    code, _, err = run_cli(capsys, "train", "logger=none", "trainer.max_epochs=1", "model.dim=16", "model.depth=1",
                           "model.num_heads=2", f"data.root={tmp_path}")  # fmt: skip
    assert code == 2 and err.splitlines()[-1] == f"poslab: error: cannot write {tmp_path / 'runs'}: permission denied"
