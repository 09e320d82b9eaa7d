"""One table says which keys may change on resume, on re-evaluation, and which a run's hash leaves out."""

from __future__ import annotations

import dataclasses

import pytest
from omegaconf import OmegaConf

from poslab.config.composition import compose, recompose, to_dict
from poslab.errors import ConfigError
from poslab.modalities import available_modalities
from poslab.run import policy
from poslab.run.policy import KeyRule, config_hash, rule


def test_every_rule_names_a_real_key():
    """A typo in the table would silently allow or fix nothing."""
    from poslab.run.trainer_options import trainer_schema

    cfgs = [compose([f"modality={m}"]) for m in available_modalities()]
    trainer_keys = {f"trainer.{f.name}" for f in dataclasses.fields(trainer_schema())}
    for entry in policy.POLICY:
        key = entry.key.removesuffix(".*")
        found = any(OmegaConf.select(c, key, default="<absent>") != "<absent>" for c in cfgs)
        assert found or key in trainer_keys, key


def test_the_longest_match_wins_and_nodes_cover_their_keys():
    assert not rule("model.dim").resume and rule("model.compile").resume
    assert not rule("encoder.base").evaluate and rule("data.image_size").evaluate
    assert rule("run.name").resume and not rule("runs").resume  # whole components only
    assert rule("seed").computes and not rule("logger.project").computes
    assert not rule("data.root").computes and rule("data.name").computes  # where the files are, not which


def test_the_error_lines_are_written_from_the_table():
    assert policy.changeable_on_resume() == (
        "model.compile, model.activation_checkpointing, "
        "trainer.max_steps, trainer.max_epochs, trainer.max_time, trainer.enable_progress_bar, "
        "data.root and run.*"
    )
    stored = to_dict(compose([]))
    with pytest.raises(ConfigError) as caught:
        recompose(stored, ["model.dim=8"])
    assert str(caught.value) == (
        "'model.dim' is fixed by the checkpoint; evaluation keeps modality, experiment, task.*, encoder.*, model.*, "
        "optim.* and sched.*"
    )


def test_a_row_of_the_table_changes_what_is_allowed(monkeypatch):
    stored = to_dict(compose([]))
    monkeypatch.setattr(policy, "POLICY", (*policy.POLICY, KeyRule("model.dropout", evaluate=True)))
    assert recompose(stored, ["model.dropout=0.5"]).model.dropout == 0.5
    plain = to_dict(compose([]))
    seeded = to_dict(compose(["seed=3"]))
    assert config_hash(plain) != config_hash(seeded)
    monkeypatch.setattr(policy, "POLICY", (*policy.POLICY, KeyRule("seed", computes=False)))
    assert config_hash(plain) == config_hash(seeded)
