"""``poslab new encoder``: stub files a fork fills in; they register, fail loudly until written, overwrite nothing."""

from __future__ import annotations

import importlib.util
import re

import pytest

from poslab.data.sources import source_modules
from poslab.encoders import registry
from poslab.errors import ConfigError
from poslab.tools.scaffold import HOOKS, new_dataset, new_encoder


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
    encoder_file, test_file = new_encoder(name, hook, reads="coords", root=tmp_path)
    assert encoder_file == tmp_path / "src" / "poslab" / "encoders" / f"{name}.py"
    assert not (tmp_path / "configs").exists()  # its options are its constructor's: no YAML
    try:
        _load(encoder_file)
        cls = registry.encoder_class(name)
        assert cls.reads == "coords" and cls.uses(hook)
        enc = registry.build_encoder(name, dim=8, num_heads=2)
        coords = torch.zeros(4, 2)
        with pytest.raises(NotImplementedError, match=f"{name}: write the {hook} hook"):
            if hook in ("encode_input", "rotate"):
                getattr(enc, hook)(torch.zeros(1, 2, 4, 4) if hook == "rotate" else torch.zeros(1, 4, 8), coords)
            elif hook == "content_bias":
                enc.content_bias(torch.zeros(1, 2, 4, 4), torch.zeros(1, 2, 4, 4), torch.zeros(1, 2, 4, 4))
            elif hook == "input_bias":
                enc.input_bias(torch.zeros(1, 4, 8), 0)
            elif hook == "attention_logits":
                enc.attention_logits(torch.zeros(1, 2, 4, 4), torch.zeros(1, 2, 4, 4), torch.zeros(1, 4, 8), 0)
            elif hook == "attention_weights":
                enc.attention_weights(torch.zeros(1, 2, 4, 4))
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

    (tmp_path / "src" / "poslab" / "encoders").mkdir(parents=True)  # a checkout
    assert main(["new", "encoder", "kerple_like", "--hook", "relative_bias", "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("wrote ") == 2 and "kerple_like" in out
    assert main(["new", "encoder", "kerple_like", "--hook", "rotate", "--root", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("poslab new: error:")


@pytest.mark.parametrize("modality", sorted(source_modules()))  # every modality whose data has sources
def test_the_dataset_stub_registers_and_its_loader_sample_and_test_fail_until_written(modality, tmp_path):
    from poslab.config.composition import compose
    from poslab.data.sources import source_modules

    package = source_modules()[modality]
    source_file, test_file = new_dataset("stub_data", modality, root=tmp_path)
    assert source_file == tmp_path / "src" / "poslab" / "modalities" / modality / "sources" / "stub_data.py"
    try:
        _load(source_file)
        assert "stub_data" in package.SOURCES and "stub_data" in package.SAMPLES
        with pytest.raises(NotImplementedError, match="stub_data: write load_stub_data"):
            source = package.SOURCES["stub_data"]
            getattr(source, "load", source)(tmp_path, False)
        with pytest.raises(NotImplementedError, match="stub_data: write sample_stub_data"):
            package.SAMPLES["stub_data"](tmp_path)
        with pytest.raises(NotImplementedError, match="stub_data: write sample_stub_data"):
            _load(test_file).test_stub_data_reads_the_values_its_file_holds(tmp_path, None)
        # the config accepts the new name: the data.name choices are the registry's
        assert compose([f"modality={modality}", "data=stub_data"]).data.name == "stub_data"
    finally:
        package.SOURCES.pop("stub_data", None)
        package.SAMPLES.pop("stub_data", None)
    assert "<what it holds, who made it, its licence" in source_file.read_text()


def test_bad_dataset_requests_are_one_line_and_write_nothing(tmp_path):
    with pytest.raises(ConfigError, match="text dataset 'wikitext2' exists already"):
        new_dataset("wikitext2", "text", root=tmp_path)
    with pytest.raises(ConfigError, match="modality 'audio' reads no datasets; valid: text, timeseries, video, vision"):
        new_dataset("mine", "audio", root=tmp_path)
    with pytest.raises(ConfigError, match="dataset name 'My-Data': lower-case"):
        new_dataset("My-Data", "text", root=tmp_path)
    assert not list(tmp_path.rglob("*.py"))


def test_the_cli_writes_the_dataset_files(tmp_path, capsys):
    from poslab.cli import main

    (tmp_path / "src" / "poslab" / "encoders").mkdir(parents=True)  # a checkout
    assert main(["new", "dataset", "cli_stub_data", "--modality", "text", "--root", str(tmp_path)]) == 0
    assert capsys.readouterr().out.count("wrote ") == 2
    assert main(["new", "dataset", "cli_stub_data", "--modality", "text", "--root", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("poslab new: error:")


def test_outside_a_checkout_new_is_one_line_and_writes_nothing(tmp_path, capsys):
    from poslab.cli import main

    assert main(["new", "encoder", "mine", "--hook", "rotate", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not a poslab checkout (no src/poslab/encoders/)" in err
    assert "plugin package" in err and not list(tmp_path.iterdir())


@pytest.mark.parametrize("grid", [False, True], ids=["sequence", "grid"])
def test_new_modality_writes_a_package_that_registers_trains_and_passes_its_own_tests(tmp_path, monkeypatch, grid):
    """The copy of the template (a sequence at steps, or a 2D grid at coords), discovered where a checkout keeps
    modalities, with its YAML and tests."""
    import sys

    import poslab.modalities
    from poslab.config.composition import compose
    from poslab.modalities import registry as plugins
    from poslab.tools.scaffold import new_modality

    written = new_modality("scaffolded", root=tmp_path, grid=grid)
    package = tmp_path / "src" / "poslab" / "modalities" / "scaffolded"
    modules = ("__init__", "schema", "data", "model", "task", "record")
    assert sorted(p.relative_to(tmp_path).as_posix() for p in written) == sorted(
        [*(f"src/poslab/modalities/scaffolded/{f}.py" for f in modules),
         "configs/modality/scaffolded.yaml", "tests/test_scaffolded_modality.py"]
    )  # fmt: skip
    for path in written:  # the template's name is gone: no toy, no Toy left
        assert not re.search(r"\btoy\b|\bToy", path.read_text()), path
    assert "class ScaffoldedDataModule(PositionDataModule)" in (package / "data.py").read_text()
    monkeypatch.setattr(poslab.modalities, "__path__", [*poslab.modalities.__path__, str(package.parent)])
    monkeypatch.setattr(plugins, "_DISCOVERED", False)  # discovered like a packaged one, by its folder
    monkeypatch.setenv("POSLAB_CONFIG_DIR", str(tmp_path / "configs"))
    try:
        assert "scaffolded" in plugins.available_modalities()
        assert compose(["modality=scaffolded"]).model.dim == 32  # its YAML
        assert list(compose(["modality=scaffolded"]).positions) == (["coords"] if grid else ["steps"])
        tests = _load(tmp_path / "tests" / "test_scaffolded_modality.py")
        own = [name for name in vars(tests) if name.startswith("test_")]
        assert len(own) == 3
        for name in own:  # every test the template wrote, as pytest would call it
            test = getattr(tests, name)
            test(tmp_path / "runs") if "tmp_path" in test.__code__.co_varnames else test()
    finally:
        plugins.unregister_modality("scaffolded")
        for name in [m for m in sys.modules if m.startswith("poslab.modalities.scaffolded")]:
            del sys.modules[name]


def test_new_modality_refuses_a_taken_name_a_bad_name_and_existing_files(tmp_path, capsys):
    from poslab.cli import main
    from poslab.tools.scaffold import new_modality

    with pytest.raises(ConfigError, match="modality 'vision' exists already; pick another name"):
        new_modality("vision", root=tmp_path)
    with pytest.raises(ConfigError, match="modality name 'Scaffolded-1': lower-case"):
        new_modality("Scaffolded-1", root=tmp_path)
    (tmp_path / "configs" / "modality").mkdir(parents=True)
    (tmp_path / "configs" / "modality" / "scaffolded.yaml").write_text("mine\n")
    with pytest.raises(ConfigError, match="scaffolded.yaml exists already; nothing written"):
        new_modality("scaffolded", root=tmp_path)
    assert (
        not list(tmp_path.rglob("*.py"))
        and (tmp_path / "configs" / "modality" / "scaffolded.yaml").read_text() == "mine\n"
    )
    (tmp_path / "src" / "poslab" / "encoders").mkdir(parents=True)  # a checkout
    assert main(["new", "modality", "scaffolded_cli", "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("wrote ") == 8 and "poslab train modality=scaffolded_cli" in out
