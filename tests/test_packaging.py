"""A wheel install (not editable) carries its configs: it lists, composes and trains without a checkout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from poslab.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_without_configs_list_is_one_line(monkeypatch, tmp_path, capsys):
    """No packaged configs (a broken install) and none of the user's: one line naming where it looked."""
    monkeypatch.delenv("POSLAB_CONFIG_DIR", raising=False)
    monkeypatch.setattr("poslab.config.files.config_dir", lambda: tmp_path)
    monkeypatch.setattr("poslab.entry_points.plugin_config_dirs", lambda: [])  # nor a plugin's
    assert main(["list"]) == 2
    assert capsys.readouterr().err == (
        f"poslab: error: no modality configs under {tmp_path}; set POSLAB_CONFIG_DIR to a configs/ folder\n"
    )


@pytest.mark.slow
def test_a_wheel_install_finds_its_bundled_configs(tmp_path):
    """Built and installed into a fresh virtual environment (the dependencies come from this one's
    site-packages on PYTHONPATH, so nothing is downloaded and this environment is left alone)."""
    import sysconfig

    wheels, venv = tmp_path / "wheels", tmp_path / "venv"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", str(ROOT), "-w", str(wheels)], check=True)
    (wheel,) = wheels.glob("poslab-*.whl")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run([*pip, "--python", str(python), "install", "--no-deps", str(wheel)], check=True)
    env = {**os.environ, "PYTHONPATH": sysconfig.get_paths()["purelib"]}
    env.pop("POSLAB_CONFIG_DIR", None)
    run = tmp_path / "elsewhere"  # no checkout around
    run.mkdir()

    def poslab(*argv: str) -> str:
        done = subprocess.run(
            [str(python), "-m", "poslab.cli", *argv], cwd=run, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    code = "import poslab.config.composition as c; print(c.config_dir())"
    where = subprocess.run([str(python), "-c", code], cwd=run, env=env, capture_output=True, text=True)
    assert where.stdout.strip() == str(venv / "share" / "poslab" / "configs"), where.stderr[-2000:]
    listed = {line.split(":")[0]: line for line in poslab("list").splitlines()}
    assert "learned2d (encode_input)" in listed["vision"]
    # the data sources are subpackages: the wheel carries them (the data.name choices come from them)
    assert "name: wikitext2" in poslab("train", "--print-config", "modality=text", "data=wikitext2")
    assert "name: rope" in poslab("train", "--print-config", "modality=text", "experiment=rope_extension")
