"""Options declared once, in a constructor's signature: the schema, the call and ``--options`` derive from it."""

from __future__ import annotations

from typing import Literal

import pytest
from omegaconf import OmegaConf

from poslab.config import compose
from poslab.config.options import keyword_options, options_schema, pick_options
from poslab.config.schema import ModelConfig
from poslab.errors import ConfigError
from poslab.modalities import available_modalities, get_modality
from poslab.tools.options import option_rows


class Net:
    def __init__(self, encoder, *, width: int, mode: Literal["a", "b"] = "a", scale: float | None = None, **extra):
        pass


def test_the_schema_is_the_signature_minus_what_the_code_supplies():
    schema = OmegaConf.structured(options_schema("NetConfig", Net, supplied=("encoder",), bases=(ModelConfig,)))
    assert list(schema) == ["compile", "activation_checkpointing", "width", "mode", "scale"]
    assert schema.mode == "a" and schema.scale is None and OmegaConf.is_missing(schema, "width")
    with pytest.raises(Exception, match="mode"):
        OmegaConf.merge(schema, {"mode": "c"})  # Literal: one of 'a', 'b'
    assert pick_options(Net, {"width": 3, "compile": True, "other": 1}, ("encoder",)) == {"width": 3}


@pytest.mark.parametrize("modality", available_modalities())
def test_every_models_config_keys_are_its_constructors_options(modality):
    """model.* = the model's keyword options (+ compile, activation_checkpointing): one place per option, no copy
    to keep in step."""
    schema = get_modality(modality).model
    model, supplied = schema.options_of, schema.supplied
    assert "encoder" in supplied and "dim" in keyword_options(model, supplied)
    shared = ["compile", "activation_checkpointing"]
    assert list(compose([f"modality={modality}"]).model) == [*shared, *keyword_options(model, supplied)]


def test_a_models_typed_option_is_validated_from_its_annotation():
    with pytest.raises(ConfigError, match="config key 'model.pool' expects one of 'cls', 'mean', got 'max'"):
        compose(["model.pool=max"])
    with pytest.raises(ConfigError, match="config key 'model.layout' expects one of 'step', 'patch', 'query'"):
        compose(["modality=timeseries", "model.layout=wide"])


def test_options_lists_every_key_with_type_default_and_value():
    rows = {key: rest for key, *rest in option_rows(compose(["modality=video", "model.dim=32"]))}
    assert rows["model.pool"] == ["one of 'cls', 'mean'", "'cls'", "'cls'"]
    assert rows["model.dim"] == ["int, in [1, 65,536]", "—", "32"]  # no default in the signature: the YAML's value
    assert rows["data.patch_size"] == ["int, >= 1", "8", "8"]  # the range declared at the field
    assert rows["encoder.sections"] == ["a list of int or null", "None", "None"]
    assert rows["data.label"][0] == "one of 'direction', 'digit'"


def test_the_cli_prints_the_options(capsys):
    from poslab.cli import main

    assert main(["train", "--options", "modality=text", "encoder=alibi"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["key", "type", "default", "value"]
    assert any(line.split()[:3] == ["model.embed_std", "float,", ">"] for line in out)
    assert any(line.startswith("encoder.bidirectional") for line in out)


def test_a_composed_configs_encoder_options_are_checked_once(monkeypatch):
    """Composing checks the options; the task then builds its encoder from them without checking them again
    (the constructor receives checked values). Built in code, ``build_encoder`` checks what it is given."""
    from poslab.data import build_datamodule
    from poslab.encoders import build_encoder, registry
    from poslab.tasks import build_task

    cfg = compose(["modality=text", "encoder=rope", "model.dim=16", "model.depth=1", "model.num_heads=2"])
    datamodule = build_datamodule(cfg)
    datamodule.setup("fit")
    calls = []
    monkeypatch.setattr(registry, "check_block", lambda *args, **kwargs: calls.append(args) or args[0])
    build_task(cfg, datamodule)
    assert calls == []
    build_encoder("rope", dim=16, num_heads=2, base=100.0)
    assert calls and calls[0][0] == {"base": 100.0}
