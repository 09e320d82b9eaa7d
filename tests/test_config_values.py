"""Values are checked by range as well as type, before anything is written: one line, the key, what is allowed."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from poslab.cli import main
from poslab.config import compose
from poslab.errors import ConfigError
from poslab.modalities import available_modalities
from poslab.schema import RANGES, Range

BAD = [
    ("model.dim=0", "config key 'model.dim' must be in [1, 65,536], got 0"),
    ("model.depth=0", "config key 'model.depth' must be in [1, 1,024], got 0"),
    ("optim.lr=-1", "config key 'optim.lr' must be > 0, got -1.0"),
    ("optim.lr=nan", "config key 'optim.lr' must be a finite number, got nan"),
    ("optim.lr=inf", "config key 'optim.lr' must be a finite number, got inf"),
    ("trainer.max_epochs=-5", "config key 'trainer.max_epochs' must be >= 1 or -1, got -5"),
    ("data.batch_size=0", "config key 'data.batch_size' must be >= 1, got 0"),
    ("seed=-1", "config key 'seed' must be in [0, 4,294,967,295], got -1"),
    ("seed=99999999999", "config key 'seed' must be in [0, 4,294,967,295], got 99999999999"),
    ("optim.warmup_fraction=2", "config key 'optim.warmup_fraction' must be in [0, 1), got 2.0"),
    ("model.dropout=2", "config key 'model.dropout' must be in [0, 1), got 2.0"),
    ("data.image_size=0", "config key 'data.image_size' must be >= 1, got 0"),
    ("data.patch_size=0", "config key 'data.patch_size' must be >= 1, got 0"),
    ("data.val_size=0", "config key 'data.val_size' must be >= 1, got 0"),
    ("trainer.val_check_interval=0", "config key 'trainer.val_check_interval' must be > 0, got 0"),
    ("optim.betas=[0.9,1.5]", "config key 'optim.betas' must be in [0, 1), got 1.5"),
    ("modality=", "'modality=' names no modality; valid: " + ", ".join(available_modalities())),
    ("trainer=", "'trainer=' names no trainer; valid: cpu, ddp, gpu"),
    ("seed=${seed}", "invalid config at 'seed': Recursive interpolation detected"),
    ("run.name=../../x", "run.name must be one folder name (no '/', not '.' or '..', 1-120 characters), got '../../x'"),
    ("run.name=/tmp/x", "run.name must be one folder name (no '/', not '.' or '..', 1-120 characters), got '/tmp/x'"),
]


@pytest.mark.parametrize(("override", "message"), BAD, ids=[b[0] for b in BAD])
def test_a_value_out_of_range_is_one_line_before_anything_is_written(override, message, tmp_path, capsys):
    assert main(["train", f"run.root={tmp_path}", override]) == 2
    err = capsys.readouterr().err
    assert err == f"poslab: error: {message}\n"
    assert not list(tmp_path.iterdir())


def test_ranges_name_real_keys_of_some_modality():
    """A typo in the table would silently check nothing (trainer keys: arguments of lightning.Trainer)."""
    import dataclasses

    from omegaconf import OmegaConf

    from poslab.modalities import available_modalities
    from poslab.optimizers import optimizer_schema, optimizers
    from poslab.trainer_schema import trainer_schema

    cfgs = [compose([f"modality={m}"]) for m in available_modalities()]
    cfgs.append(compose(["experiment=resolution"]))
    signature_keys = {f"trainer.{f.name}" for f in dataclasses.fields(trainer_schema())}
    signature_keys |= {f"optim.{f.name}" for name in optimizers() for f in dataclasses.fields(optimizer_schema(name))}
    for key in RANGES:
        if key.startswith(("trainer.", "optim.")):
            assert key in signature_keys, key
        else:
            assert any(OmegaConf.select(c, key, default="<absent>") != "<absent>" for c in cfgs), key


@pytest.mark.parametrize(
    ("allowed", "inside", "outside", "text"),
    [
        (Range(1), [1, 7], [0, -3], ">= 1"),
        (Range(0, low_open=True), [1e-9, 5], [0, -1], "> 0"),
        (Range(0, 1, high_open=True), [0, 0.5], [1, -0.1], "in [0, 1)"),
    ],
)
def test_range_bounds(allowed, inside, outside, text):
    assert all(allowed.holds(v) for v in inside) and not any(allowed.holds(v) for v in outside)
    assert allowed.describe() == text


def test_short_runs_have_a_schedule(tiny):
    """A warmup fraction of a few steps rounds to zero warmup steps, where OneCycleLR divides by zero."""
    import torch

    from poslab.optimizers import configure
    from poslab.train import train

    summary = train(compose([*tiny, "trainer.max_epochs=1", "trainer.limit_train_batches=2"]))
    assert summary["metrics"]["test/acc"] >= 0
    for steps in (1, 2, 3, 10):  # the schedule runs every step, warming up and decaying, however short the run
        module = torch.nn.Linear(2, 2)
        optim = {"lr": 1.0, "weight_decay": 0.0, "betas": (0.9, 0.99), "warmup_fraction": 0.05}
        schedule = configure(module, optim, {}, steps)["lr_scheduler"]["scheduler"]
        lrs = [schedule.get_last_lr()[0]]
        for _ in range(max(steps, 2) - 1):
            schedule.optimizer.step()
            schedule.step()
            lrs.append(schedule.get_last_lr()[0])
        peak = lrs.index(max(lrs))
        if steps >= 3:  # (with 1 or 2 steps it just runs)
            assert lrs[0] < lrs[peak] <= 1.0 and lrs[-1] < lrs[peak]  # it warms up and decays


KEYS = sorted({*RANGES, "model.mlp_ratio", "data.coords", "encoder.name", "trainer.devices", "logger.mode"})
VALUES = st.one_of(
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(alphabet="abc01-._/$ {}", max_size=8),
    st.sampled_from(["null", "true", "[1,2]", "{a: 1}", "", "${seed}", "rope", "raw"]),
)


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(modality=st.sampled_from(available_modalities()), key=st.sampled_from(KEYS), value=VALUES)
def test_any_override_composes_or_is_one_config_error(modality, key, value):
    """Random values for checked keys: a valid config, or a ConfigError of one line — never another exception."""
    try:
        compose([f"modality={modality}", f"{key}={value}"])
    except ConfigError as exc:
        assert "\n" not in str(exc)
