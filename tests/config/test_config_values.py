"""Values are checked by range as well as type, before anything is written: one line, the key, what is allowed."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from poslab.cli import main
from poslab.config.composition import compose
from poslab.config.ranges import Range
from poslab.errors import ConfigError
from poslab.modalities import available_modalities
from tests.config.schemas import declared_ranges

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
    ("trainer=", "'trainer=' names no trainer; valid: cpu, ddp, fsdp, gpu, gpu16"),
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


def checked_ranges() -> dict[str, Range]:
    """Every range the schemas declare, over the modalities (their default encoders), the trainer and every
    optimiser."""
    from poslab.config.validation import root_schema
    from poslab.encoders.registry import encoder_schema
    from poslab.modalities.registry import get_modality
    from poslab.run.trainer_options import trainer_schema
    from poslab.tasks.optimizers import optimizer_schema, optimizers

    found: dict[str, Range] = {}
    for modality in available_modalities():
        encoder = compose([f"modality={modality}"]).encoder.name
        found.update(declared_ranges(root_schema(get_modality(modality), encoder_schema(encoder))))
    found.update(declared_ranges(trainer_schema(), "trainer."))
    for name in optimizers():
        found.update(declared_ranges(optimizer_schema(name), "optim."))
    return found


def test_the_ranges_tables_of_library_signatures_name_real_arguments():
    """The trainer's and the optimisers' ranges sit in tables (their signatures are Lightning's and torch's):
    a typo there would silently check nothing."""
    import dataclasses

    from poslab.config.options import keyword_options
    from poslab.run import trainer_options as trainer_schema
    from poslab.tasks import optimizers

    trainer_keys = {f.name for f in dataclasses.fields(trainer_schema.trainer_schema())}
    assert set(trainer_schema.RANGES) <= trainer_keys, set(trainer_schema.RANGES) - trainer_keys
    optimiser_keys = {k for cls in optimizers.optimizers().values() for k in keyword_options(cls)}
    assert set(optimizers.RANGES) <= optimiser_keys, set(optimizers.RANGES) - optimiser_keys


def test_a_range_is_declared_at_its_field_and_checked_there(tmp_path):
    """Fields of a modality's dataclasses, a model constructor's parameters and the root's keys carry their
    ranges; removing one from an annotation stops its check (the ranges are not kept apart from the fields)."""
    ranges = checked_ranges()
    assert ranges["model.dim"] == Range(1, 2**16)  # ViT.__init__'s `dim: Width`
    assert ranges["data.augment.scale"] == Range(0, 1, high_open=True)  # a nested block's field
    assert ranges["seed"] == Range(0, 2**32 - 1) and ranges["trainer.max_epochs"] == Range(1, also=(-1,))
    assert ranges["optim.warmup_fraction"] == Range(0, 1, high_open=True)
    assert ranges["optim.momentum"] == Range(0)  # SGD's, RMSprop's
    with pytest.raises(ConfigError, match="'optim.momentum' must be >= 0, got -0.5"):
        compose(["optim.name=sgd", "optim.momentum=-0.5"])


def test_a_plugins_modality_giving_ranges_by_key_still_has_them_checked_with_a_deprecation_warning(monkeypatch):
    from dataclasses import replace

    from poslab.modalities import registry as plugins

    vision = plugins.get_modality("vision")
    with pytest.warns(DeprecationWarning, match=r"Modality\(ranges=...\) is deprecated; declare each range"):
        old_style = replace(vision, ranges={"data.patch_size": Range(5)})
    monkeypatch.setitem(plugins._REGISTRY, "vision", old_style)
    with pytest.raises(ConfigError, match="'data.patch_size' must be >= 5, got 4"):
        compose(["data.patch_size=4"])


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

    from poslab.run.train import train
    from poslab.tasks.optimizers import configure

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


KEYS = sorted({*checked_ranges(), "model.mlp_ratio", "data.coords", "encoder.name", "trainer.devices", "logger.mode"})
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
