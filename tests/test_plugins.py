"""A package installed beside poslab adds an encoder, a modality and a dataset through entry points, and its
``configs/`` overlays the packaged configs; a user's config folder needs only the files it adds."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from poslab.config.composition import compose

ROOT = Path(__file__).resolve().parents[1]

PLUGIN = '''
import torch

from poslab.encoders.base import PositionEncoder
from poslab.encoders.registry import register_encoder


@register_encoder("halfsteps")
class HalfSteps(PositionEncoder):
    """A plugin's encoder: scale * sin(step * c / D) on channel c."""

    reads = "steps"

    def __init__(self, dim: int, num_heads: int, scale: float = 0.5) -> None:
        super().__init__(dim, num_heads)
        self.scale = scale

    def encode_input(self, x, pos):
        steps = self.field(pos).to(x.dtype)
        rates = torch.arange(1, x.shape[-1] + 1, device=x.device, dtype=x.dtype) / x.shape[-1]
        return x + self.scale * torch.sin(steps[..., None] * rates)
'''

MODALITY = """
from poslab.modalities import register_modality
from poslab.tools.scaffolds.modality.record import MODALITY

register_modality(MODALITY)
"""

SOURCE = """
from poslab.modalities.vision.sources import SAMPLES, SOURCES

SOURCES["tinydigits"] = SOURCES["mnist5k"]  # a plugin's dataset: here the embedded digits under a new name
SAMPLES["tinydigits"] = SAMPLES["mnist5k"]
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """A folder holding the installed plugin package ``poslab_toyplug`` (its dist-info names the entry points)."""
    from tests.test_modalities import TOY_YAML

    site = tmp_path_factory.mktemp("site")
    package = site / "poslab_toyplug"
    (package / "configs" / "modality").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "encoders.py").write_text(PLUGIN)
    (package / "toy.py").write_text(MODALITY)
    (package / "digits.py").write_text(SOURCE)
    (package / "configs" / "modality" / "toy.yaml").write_text(TOY_YAML)
    info = site / "poslab_toyplug-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: poslab-toyplug\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        textwrap.dedent("""
        [poslab.encoders]
        halfsteps = poslab_toyplug.encoders
        [poslab.modalities]
        toy = poslab_toyplug.toy
        [poslab.sources]
        vision.tinydigits = poslab_toyplug.digits
        """)
    )
    return site


def poslab(site: Path, *argv: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT), str(ROOT / "src")])}
    env.pop("POSLAB_CONFIG_DIR", None)
    return subprocess.run([sys.executable, "-m", "poslab", *argv], cwd=cwd, env=env, capture_output=True, text=True)


@pytest.mark.slow
def test_an_installed_plugin_adds_its_encoder_modality_and_dataset(site, tmp_path):
    listed = poslab(site, "list", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    lines = dict(line.split(": ", 1) for line in listed.stdout.splitlines())
    assert "halfsteps (encode_input)" in lines["text"] and "halfsteps (encode_input)" in lines["toy"]
    assert "halfsteps" not in lines["vision"]  # it reads steps
    trained = poslab(site, "train", "modality=toy", "encoder=halfsteps", "encoder.scale=0.25", "logger=none",
                     f"run.root={tmp_path / 'runs'}", "trainer.enable_progress_bar=false", cwd=tmp_path)  # fmt: skip
    assert trained.returncode == 0, trained.stderr[-2000:]
    (summary,) = (tmp_path / "runs" / "toy").glob("*/summary.json")
    recorded = json.loads(summary.read_text())
    assert recorded["config"]["encoder"] == {"name": "halfsteps", "scale": 0.25}
    assert recorded["metrics"]["test/loss"] > 0
    shown = poslab(site, "train", "data=tinydigits", "--print-config", cwd=tmp_path)
    assert shown.returncode == 0 and "name: tinydigits" in shown.stdout, shown.stderr


def test_a_plugin_that_fails_to_load_is_one_line(tmp_path):
    info = tmp_path / "broken-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[poslab.encoders]\nbroken = no_such_module\n")
    done = poslab(tmp_path, "list", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == (
        "poslab: error: plugin broken = no_such_module (poslab.encoders) does not load: No module named "
        "'no_such_module'\n"
    )


def test_a_user_config_folder_overlays_the_packaged_configs(tmp_path, monkeypatch):
    """POSLAB_CONFIG_DIR needs only the files it adds or replaces; the rest come from the packaged configs."""
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "mine.yaml").write_text("defaults:\n  encoder: rope2d\ndata:\n  image_size: 56\n")
    monkeypatch.setenv("POSLAB_CONFIG_DIR", str(tmp_path))
    cfg = compose(["experiment=mine"])
    assert (cfg.modality, cfg.encoder.name, cfg.data.image_size) == ("vision", "rope2d", 56)
    assert compose(["modality=text"]).encoder.name == "rope"  # the packaged modality YAML still applies


@pytest.mark.slow
def test_an_installed_plugin_leaves_the_project_docs_as_they_are(site, tmp_path):
    """The docs describe the project; a plugin's encoder, modality and dataset are its own docs' to list."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT / "src")])}
    env.pop("POSLAB_CONFIG_DIR", None)
    command = [sys.executable, "-c", "from poslab import docs; print(docs.own_encoders(), docs.own_modalities())"]
    own = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert own.returncode == 0 and "halfsteps" not in own.stdout and "'toy'" not in own.stdout, own.stderr
    assert "'rope'" in own.stdout and "'vision'" in own.stdout
    check = [sys.executable, "-m", "poslab.tools.docs", "--check", str(ROOT / "docs")]
    checked = subprocess.run(check, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


#: A test file that calls one of these enumerates a registry: what a plugin adds joins its cases.
REGISTRY_WIDE = re.compile(r"\b(available_encoders|available_modalities|own_modalities|own_encoders)\(")


def registry_wide_test_files() -> list[str]:
    return sorted(str(p) for p in (ROOT / "tests").rglob("test_*.py") if REGISTRY_WIDE.search(p.read_text()))


def test_the_registry_wide_test_files_are_found():
    files = [Path(f).relative_to(ROOT).as_posix() for f in registry_wide_test_files()]
    assert {"tests/encoders/test_registry.py", "tests/run/test_train.py", "tests/tools/test_docs.py"} <= set(files)
    assert "tests/run/test_locks.py" not in files


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_the_registry_wide_fast_tests_pass_with_a_plugins_modality_and_encoder_installed(site):
    """Registry-wide tests take in what a plugin adds (the toy modality, an encoder) with no edit to them: every
    fast test of the files that enumerate a registry (two thirds of the fast tier's time)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT), str(ROOT / "src")])}
    env.pop("POSLAB_CONFIG_DIR", None)
    listed = subprocess.run([sys.executable, "-m", "poslab", "list"], env=env, capture_output=True, text=True)
    assert "toy: " in listed.stdout and "halfsteps" in listed.stdout  # the plugin is in
    # pyproject's addopts select the fast tier (not slow, not network)
    command = [sys.executable, "-m", "pytest", "-q", "-x", "-n", "2", "-p", "no:cacheprovider",
               *registry_wide_test_files()]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:]
