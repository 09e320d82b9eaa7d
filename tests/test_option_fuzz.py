"""Random values for every declared numeric option, each run as a real ``poslab train`` process: it either
ends (exit 0) with a finite summary, or refuses in one error line and leaves nothing behind (a run stopped
mid-training keeps its checkpoints and says so). A value that made a run endless fails, naming it."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from poslab.config import compose
from poslab.modalities import available_modalities
from tests.conftest import tiny_overrides

VALUES = st.one_of(
    st.integers(-3, 40),
    st.floats(-1.5, 3.0, allow_nan=False),
    st.sampled_from([0, -1, 0.0, 1e30, -1e30, math.inf, -math.inf, math.nan, 10**9]),
)

#: Keys whose large values only make a run long, not wrong: capped so that each example ends.
LONG = ("trainer.max_epochs", "trainer.max_steps")
#: Seconds one tiny run may take (about ten on this machine) before its value counts as endless.
ENDLESS_S = 150


def numeric_keys(overrides: list[str]) -> list[str]:
    """Every numeric option of the composed config (lists as their first item), the encoder's too."""
    found = []

    def walk(node, prefix=""):
        for key, value in node.items():
            full = f"{prefix}{key}"
            if isinstance(value, dict):
                walk(value, f"{full}.")
            elif isinstance(value, bool) or key == "name":
                continue
            elif isinstance(value, int | float) or (isinstance(value, list) and value and isinstance(value[0], int)):
                found.append(full)

    walk(OmegaConf.to_container(compose(overrides), resolve=True))
    return sorted(k for k in found if not k.startswith(("compare_", "trainer.devices")))


def written(run_root: Path) -> list[Path]:
    return [p for p in run_root.rglob("*") if p.is_file()] if run_root.exists() else []


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("modality", available_modalities())
def test_random_option_values_end_cleanly(request, modality):
    tiny = tiny_overrides(request, modality)
    run_root = Path(next(o for o in tiny if o.startswith("run.root=")).split("=", 1)[1])
    composed = compose(tiny)
    keys = numeric_keys(tiny)

    @settings(max_examples=8, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])  # fmt: skip
    @given(key=st.sampled_from(keys), value=VALUES)
    def run(key, value):
        if key in LONG and isinstance(value, int | float) and math.isfinite(value) and value > 40:
            value = 40
        shutil.rmtree(run_root, ignore_errors=True)
        shown = f"[{value}]" if isinstance(OmegaConf.select(composed, key), list) else repr(value)
        command = [sys.executable, "-m", "poslab", "train", *tiny, f"{key}={shown}".replace("'", "")]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=ENDLESS_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{key}={shown} made the run endless (over {ENDLESS_S} s)")
        errors = [line for line in done.stderr.splitlines() if line.startswith("poslab:")]
        if done.returncode == 0:
            (summary,) = run_root.rglob("summary.json")
            metrics = json.loads(summary.read_text())["metrics"]
            assert all(math.isfinite(v) for v in metrics.values()), (key, value, metrics)
            return
        assert done.returncode == 2 and len(errors) == 1, (key, value, done.returncode, done.stderr[-2000:])
        assert "Traceback" not in done.stderr, (key, value, done.stderr[-2000:])
        if "checkpoints" not in errors[0]:  # only a run stopped mid-training keeps files, and says so
            assert not written(run_root), (key, value, errors[0])

    run()
