"""Random values for the declared numeric options, each run as a real ``poslab train`` process: it either
ends (exit 0) with a finite summary, or refuses in one error line and leaves nothing behind (a run stopped
mid-training keeps its checkpoints and says so). A value that made a run endless fails, naming it.

Each example draws an encoder that fits the modality, then one of that config's numeric options: the
modality's, the trainer's and optimiser's, and the encoder's own, including those whose default is null
(RoPE's scaling factors, windows) and float lists."""

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

from poslab.config.composition import compose
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
    """Every numeric option of the composed config (lists as their first item), and every option the schema
    gives a range though its value is null (``encoder.window``, ``encoder.scaling.attention_factor``)."""
    from poslab.encoders.registry import encoder_schema
    from tests.config.schemas import declared_ranges

    cfg = compose(overrides)
    found = []

    def walk(node, prefix=""):
        for key, value in node.items():
            full = f"{prefix}{key}"
            if isinstance(value, dict):
                walk(value, f"{full}.")
            elif isinstance(value, bool) or key == "name":
                continue
            elif isinstance(value, int | float) or (
                isinstance(value, list) and value and isinstance(value[0], int | float)
            ):
                found.append(full)

    walk(OmegaConf.to_container(cfg, resolve=True))
    found += [key for key, _ in declared_ranges(encoder_schema(cfg.encoder.name), "encoder.")]
    return sorted({k for k in found if not k.startswith(("compare_", "trainer.devices"))})


def list_keys(overrides: list[str]) -> set[str]:
    """The options whose values are lists, from the config and, for null ones, the encoder schema's types."""
    import dataclasses
    import typing

    from poslab.encoders.registry import encoder_schema

    cfg = compose(overrides)
    found = set()

    def walk(node, prefix=""):
        for key, value in node.items():
            if isinstance(value, dict):
                walk(value, f"{prefix}{key}.")
            elif isinstance(value, list):
                found.add(f"{prefix}{key}")

    def schema_walk(schema, prefix):
        for spec in dataclasses.fields(schema):
            hint = typing.get_type_hints(schema).get(spec.name, spec.type)
            nested = [a for a in (hint, *typing.get_args(hint)) if dataclasses.is_dataclass(a)]
            if nested:
                schema_walk(nested[0], f"{prefix}{spec.name}.")
            elif "list" in str(hint):
                found.add(f"{prefix}{spec.name}")

    walk(OmegaConf.to_container(cfg, resolve=True))
    schema_walk(encoder_schema(cfg.encoder.name), "encoder.")
    return found


def fitting_encoders(modality: str) -> list[str]:
    from poslab.encoders import available_encoders

    return sorted(available_encoders(modality))


def written(run_root: Path) -> list[Path]:
    return [p for p in run_root.rglob("*") if p.is_file()] if run_root.exists() else []


@pytest.mark.slow
@pytest.mark.timeout(1500)
@pytest.mark.parametrize("modality", available_modalities())
def test_random_option_values_end_cleanly(request, modality):
    tiny = tiny_overrides(request, modality)
    run_root = Path(next(o for o in tiny if o.startswith("run.root=")).split("=", 1)[1])
    encoders = fitting_encoders(modality)
    keys = {encoder: numeric_keys([*tiny, f"encoder={encoder}"]) for encoder in encoders}
    lists = {encoder: list_keys([*tiny, f"encoder={encoder}"]) for encoder in encoders}

    @settings(max_examples=12, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])  # fmt: skip
    @given(data=st.data())
    def run(data):
        encoder = data.draw(st.sampled_from(encoders), label="encoder")
        key = data.draw(st.sampled_from(keys[encoder]), label="key")
        value = data.draw(VALUES, label="value")
        if key in LONG and isinstance(value, int | float) and math.isfinite(value) and value > 40:
            value = 40
        shutil.rmtree(run_root, ignore_errors=True)
        shown = f"[{value}]" if key in lists[encoder] else repr(value)
        command = [
            sys.executable,
            "-m",
            "poslab",
            "train",
            *tiny,
            f"encoder={encoder}",
            f"{key}={shown}".replace("'", ""),
        ]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=ENDLESS_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"encoder={encoder} {key}={shown} made the run endless (over {ENDLESS_S} s)")
        errors = [line for line in done.stderr.splitlines() if line.startswith("poslab:")]
        case = (encoder, key, value)
        if done.returncode == 0:
            (summary,) = run_root.rglob("summary.json")
            metrics = json.loads(summary.read_text())["metrics"]
            assert all(math.isfinite(v) for v in metrics.values()), (*case, metrics)
            return
        assert done.returncode == 2 and len(errors) == 1, (*case, done.returncode, done.stderr[-2000:])
        assert "Traceback" not in done.stderr, (*case, done.stderr[-2000:])
        if "checkpoints" not in errors[0]:  # only a run stopped mid-training keeps files, and says so
            assert not written(run_root), (*case, errors[0])

    run()
