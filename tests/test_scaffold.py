"""``poslab new encoder``: stub files a fork fills in; they register, fail loudly until written, overwrite nothing."""

from __future__ import annotations

import importlib.util

import pytest
import yaml

from poslab.encoders import registry
from poslab.errors import ConfigError
from poslab.scaffold import HOOKS, new_encoder


def _load(path):
    """Import a generated encoder module from outside the package (the test must not write into src/)."""
    spec = importlib.util.spec_from_file_location(f"scaffolded_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("hook", list(HOOKS))
def test_the_stub_registers_and_its_hook_and_golden_test_fail_until_written(hook, tmp_path):
    import torch

    name = f"stub_{hook}"
    encoder_file, config_file, test_file = new_encoder(name, hook, reads="coords", root=tmp_path)
    assert encoder_file == tmp_path / "src" / "poslab" / "encoders" / f"{name}.py"
    assert yaml.safe_load(config_file.read_text()) == {"name": name}
    try:
        _load(encoder_file)
        cls = registry.encoder_class(name)
        assert cls.reads == "coords" and cls.uses(hook)
        enc = registry.build_encoder(name, dim=8, num_heads=2)
        coords = torch.zeros(4, 2)
        with pytest.raises(NotImplementedError, match=f"{name}: write the {hook} hook"):
            if hook in ("encode_input", "rotate"):
                getattr(enc, hook)(torch.zeros(1, 2, 4, 4) if hook == "rotate" else torch.zeros(1, 4, 8), coords)
            else:
                enc.attention_bias(coords, coords)
        with pytest.raises(AssertionError, match=f"{name}: write the golden values from the paper"):
            _load(test_file).__dict__[f"test_{name}_golden_values"]()
    finally:
        registry._REGISTRY.pop(name, None)
    assert "Authors year" in encoder_file.read_text()  # the docstring asks for the paper and its equation


def test_bad_requests_are_one_line_and_write_nothing(tmp_path):
    with pytest.raises(ConfigError, match="encoder 'rope' exists already"):
        new_encoder("rope", "rotate", root=tmp_path)
    with pytest.raises(ConfigError, match="unknown hook 'bias'; valid: encode_input, rotate"):
        new_encoder("mine", "bias", root=tmp_path)
    with pytest.raises(ConfigError, match="unknown positions field 'pixels'; valid: steps, coords"):
        new_encoder("mine", "rotate", reads="pixels", root=tmp_path)
    with pytest.raises(ConfigError, match="lower-case letters"):
        new_encoder("My-Enc", "rotate", root=tmp_path)
    assert not list(tmp_path.rglob("*.py"))
    new_encoder("mine", "rotate", root=tmp_path)
    with pytest.raises(ConfigError, match="mine.py exists already; nothing written"):
        new_encoder("mine", "encode_input", root=tmp_path)


def test_the_cli_and_make_target_write_the_files(tmp_path, capsys):
    from poslab.cli import main

    assert main(["new", "encoder", "kerple_like", "--hook", "relative_bias", "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("wrote ") == 3 and "kerple_like" in out
    assert main(["new", "encoder", "kerple_like", "--hook", "rotate", "--root", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("poslab new: error:")
