"""A mistyped key is found before torch loads, with the line composing prints, and only from a key tree of the
current files (poslab.cli.typos)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time

import pytest

from poslab.cli import main
from poslab.cli.typos import check_keys, remember_keys, selected_modality, tree_path
from poslab.config.composition import compose
from poslab.config.validation import root_schema
from poslab.encoders.registry import encoder_schema
from poslab.errors import ConfigError
from poslab.modalities import available_modalities, get_modality


def message(call, *args) -> str | None:
    try:
        call(*args)
    except ConfigError as exc:
        return str(exc)
    return None


def typo_cases(modality: str) -> list[str]:
    """One misspelt key in every dataclass node of the modality's schema (``model.dimx``, ``runx``...)."""
    schema = root_schema(get_modality(modality), encoder_schema("none"))
    cases = [f"{dataclasses.fields(schema)[2].name}x"]  # a top-level key
    for node in dataclasses.fields(schema):
        if dataclasses.is_dataclass(node.type if isinstance(node.type, type) else None) and node.name != "encoder":
            cases.append(f"{node.name}.{dataclasses.fields(node.type)[0].name}x")
    return cases


@pytest.mark.parametrize("modality", available_modalities())
def test_a_typo_in_every_node_is_the_line_composing_prints(modality):
    remember_keys()
    cases = typo_cases(modality)
    assert {c.split(".")[0] for c in cases} >= {"task", "data", "model", "eval", "run", "logger"}
    for key in cases:
        line = [f"modality={modality}", f"{key}=1"]
        early = message(check_keys, line)
        assert early is not None and early.startswith(f"unknown config key '{key}'"), (key, early)
        assert early == message(compose, line), key


@pytest.mark.parametrize("modality", available_modalities())
def test_every_key_composing_takes_passes_and_open_nodes_are_left_to_composing(modality):
    remember_keys()
    cfg = compose([f"modality={modality}"])
    keys = [f"{node}.{key}" for node in ("task", "data", "model", "eval", "run", "logger") for key in cfg[node]]
    keys += [k for k in cfg if k not in ("task", "data", "model", "eval", "run", "logger")]
    keys += ["trainer.no_such_argument", "optim.no_such", "encoder.no_such", "callbacks", "+model.dimx", "data"]
    check_keys([f"modality={modality}", *(f"{k}=1" for k in keys)])  # no line: composing checks these


def test_the_modality_is_the_one_composing_takes():
    assert selected_modality([]) == compose([]).modality
    assert selected_modality(["experiment=bpe_lengen"]) == "text"
    assert selected_modality(["experiment=bpe_lengen", "modality=vision"]) == "vision"
    assert selected_modality(["experiment=../x"]) == compose([]).modality  # a name, never a path
    remember_keys()
    line = ["experiment=bpe_lengen", "data.nmae=1"]
    assert message(check_keys, line) == message(compose, line)


def test_without_a_tree_of_the_current_files_nothing_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("POSLAB_CONFIG_DIR", str(tmp_path))
    remember_keys()
    assert message(check_keys, ["modality=vision", "model.dimx=1"])
    before = tree_path("vision")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "wide.yaml").write_text("dim: 96\n")  # a new YAML: another fingerprint
    assert tree_path("vision") != before
    assert message(check_keys, ["modality=vision", "model.dimx=1"]) is None
    remember_keys()
    tree_path("vision").write_text("{not json")  # unreadable: composing decides
    assert message(check_keys, ["modality=vision", "model.dimx=1"]) is None
    os.utime(tmp_path / "model" / "wide.yaml", ns=(1, time.time_ns() + 10**9))  # an edit: another fingerprint
    assert not tree_path("vision").exists()


def test_a_typo_is_one_line_without_importing_torch(tmp_path):
    env = {**os.environ, "POSLAB_CACHE": str(tmp_path)}
    code = "import sys; from poslab.cli import main; rc = main({argv!r}); print(rc, 'torch' in sys.modules)"
    first = subprocess.run([sys.executable, "-c", code.format(argv=["train", "--print-config"])], env=env,
                           capture_output=True, text=True, timeout=120)  # fmt: skip
    assert first.stdout.splitlines()[-1] == "0 True"  # composing remembers every modality's keys
    typo = subprocess.run([sys.executable, "-c", code.format(argv=["train", "model.dimm=1"])], env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert typo.stdout.strip() == "2 False"
    assert typo.stderr.strip() == "poslab: error: unknown config key 'model.dimm' (did you mean 'model.dim'?)"
    other = subprocess.run([sys.executable, "-c", code.format(argv=["prepare", "modality=text", "data.nmae=x"])],
                           env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert other.stdout.strip() == "2 False"  # every modality's tree was kept, not only vision's
    assert other.stderr.strip() == "poslab: error: unknown config key 'data.nmae' (did you mean 'data.name'?)"


def test_the_command_checks_keys_before_it_flushes_denormals(monkeypatch):
    import poslab.run.denormals

    calls = []
    monkeypatch.setattr(poslab.run.denormals, "flush_denormals", lambda: calls.append("flush"))
    monkeypatch.setattr("poslab.cli.typos.check_keys", lambda overrides: calls.append(("keys", tuple(overrides))))
    monkeypatch.setattr("poslab.cli._dispatch", lambda argv: calls.append("run") or 0)
    assert main(["train", "model.dim=8"], flush=True) == 0
    assert calls == [("keys", ("model.dim=8",)), "flush", "run"]
