"""Modalities are plugins: discovered from their packages, named nowhere else, and a new one needs no edit."""

from __future__ import annotations

import ast
import functools
import io
import re
import tokenize
from pathlib import Path

import pytest

import poslab
import poslab.tools.scaffolds.modality
from poslab.config import compose
from poslab.config.files import group_choices
from poslab.errors import ConfigError
from poslab.modalities import available_modalities, get_modality, register_modality, unregister_modality
from poslab.tools.options import option_rows
from poslab.tools.scaffolds.modality.record import MODALITY as TEMPLATE_MODALITY
from tests.conftest import TINY

PACKAGE = Path(poslab.__file__).parent
#: Modules that name modalities on purpose, and why.
NAMING_FOR_A_REASON = {
    "tools/gpu_check.py": "its acceptance table trains each built-in modality with encoders chosen per hook family",
}
#: Every module outside a modality's own package (and the new-modality template): generic code works for any
#: modality, so it names none.
GENERIC = sorted(
    str(p.relative_to(PACKAGE))
    for p in PACKAGE.rglob("*.py")
    if p.relative_to(PACKAGE).parts[0] != "modalities" or p.parent == PACKAGE / "modalities"
    if "scaffolds" not in p.relative_to(PACKAGE).parts and p.relative_to(PACKAGE).as_posix() not in NAMING_FOR_A_REASON
)


def test_every_modality_package_is_registered_with_its_yaml_and_a_tiny_test_config():
    """The packaged modalities and any a plugin adds: each with its YAML and a tiny run for the tests."""
    import poslab.modalities

    packaged = sorted(p.name for p in Path(poslab.modalities.__file__).parent.iterdir() if (p / "__init__.py").exists())
    assert set(TINY) <= set(packaged) <= set(available_modalities())
    assert group_choices("modality") == available_modalities()
    for modality in available_modalities():  # a new or a plugin's modality declares its tiny run
        assert modality in TINY or get_modality(modality).tiny, modality


@functools.cache
def _defined_names() -> dict[str, set[str]]:
    """The classes each modality's package defines under its name (``VisionDataModule``; not ``Series``)."""
    found = {}
    for name in available_modalities():
        folder = PACKAGE / "modalities" / name
        trees = [ast.parse(p.read_text()) for p in folder.rglob("*.py")] if folder.is_dir() else []
        classes = {n.name for tree in trees for n in tree.body if isinstance(n, ast.ClassDef)}
        found[name] = {c for c in classes if name in c.lower()}
    return found


def _named_modalities(path: Path) -> list[str]:
    """Modality names a module's code uses: string literals equal to one (or ``modality=<name>``), imports of a
    modality's package, and names its package defines (``VisionDataModule``)."""
    names = available_modalities()
    found = []
    tokens = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
    for tok in tokens:
        if tok.type == tokenize.STRING and not tok.string.startswith(('"""', "'''")):
            value = tok.string.strip("\"'rfb")
            found += [n for n in names if value in (n, f"modality={n}") or f"modalities.{n}" in value]
        elif tok.type == tokenize.NAME:
            found += [n for n, defined in _defined_names().items() if tok.string in defined]
    text = path.read_text()
    found += [n for n in names if re.search(rf"poslab\.modalities\.{n}\b", text)]
    return sorted(set(found))


@pytest.mark.parametrize("module", GENERIC)
def test_generic_modules_name_no_modality(module):
    assert _named_modalities(PACKAGE / module) == []


def test_the_check_finds_a_named_modality(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text('if cfg.modality == "vision":\n    from poslab.modalities.text.data import TextDataModule\n')
    assert _named_modalities(planted) == ["text", "vision"]


def test_list_shows_every_modality_and_its_encoders(capsys):
    from poslab.cli import main

    assert main(["list"]) == 0
    lines = dict(line.split(": ", 1) for line in capsys.readouterr().out.strip().splitlines())
    assert sorted(lines) == available_modalities()
    assert "rope3d (rotate)" in lines["video"] and "sincos2d (encode_input)" in lines["video"]
    assert "rope3d" not in lines["vision"] and "sincos2d" not in lines["text"]


def test_an_unknown_modality_is_one_line_naming_the_valid_ones():
    valid = ", ".join(available_modalities())
    with pytest.raises(ConfigError, match=rf"^unknown modality 'vidio' \(did you mean 'video'\?\); valid: {valid}$"):
        get_modality("vidio")


# -- the toy modality: poslab new modality's template (generated data, order-sensitive), registered by a test ---
#: The toy's record: what a modality package (or a plugin's) registers.
TOY = TEMPLATE_MODALITY
TOY_YAML = (Path(poslab.tools.scaffolds.modality.__file__).parent / "toy.yaml").read_text()


@pytest.fixture
def toy_modality(tmp_path, monkeypatch):
    """The toy modality (the template) registered from this file, its YAML in a config folder of its own
    (overlaying the packaged configs)."""
    configs = tmp_path / "configs"
    (configs / "modality").mkdir(parents=True)
    (configs / "modality" / "toy.yaml").write_text(TOY_YAML)
    monkeypatch.setenv("POSLAB_CONFIG_DIR", str(configs))
    already = "toy" in available_modalities()  # a plugin package installed it
    register_modality(TOY)
    yield
    if not already:
        unregister_modality("toy")


def test_a_modality_registered_from_a_test_file_trains_without_editing_the_package(toy_modality, tmp_path, capsys):
    from poslab.cli import main
    from poslab.encoders import available_encoders
    from poslab.run.train import train
    from poslab.study.report import build_report

    assert "toy" in available_modalities()
    steps_encoders = available_encoders("toy")
    assert {"rope", "alibi", "learned", "sinusoidal", "t5", "none"} <= set(steps_encoders)
    assert not {"sincos2d", "rope3d", "calendar"} & set(steps_encoders)  # they read coords / coords3d / times
    summaries = []
    for encoder in ("rope", "learned"):
        summary = train(compose(["modality=toy", f"encoder={encoder}", "logger=none", f"run.root={tmp_path / 'runs'}",
                                 "trainer.enable_progress_bar=false", *TOY.tiny]))  # fmt: skip
        assert summary["modality"] == "toy" and summary["metrics"]["test/loss"] > 0
        summaries.append(summary["run_dir"])
    report = build_report(summaries, tmp_path / "reports")
    assert "`test/loss`" in report.read_text()
    with pytest.raises(ConfigError, match="unknown config key 'data.lenght'"):
        compose(["modality=toy", "data.lenght=4"])
    # data options are declared once (the template's ToyData): --options lists them with defaults; overrides are typed
    rows = {key: (kind, default, value) for key, kind, default, value in option_rows(compose(["modality=toy"]))}
    assert rows["data.length"] == ("int, >= 2", "8", "8")
    assert rows["task.name"] == ("one of 'order'", "'order'", "'order'")
    assert compose(["modality=toy", "data.length=4"]).data.length == 4
    with pytest.raises(ConfigError, match="data.length"):
        compose(["modality=toy", "data.length=four"])
    capsys.readouterr()  # what the runs above printed
    assert main(["list", "toy"]) == 0 and capsys.readouterr().out.startswith("toy: alibi")


def test_every_data_source_of_every_modality_has_the_one_loader_signature():
    """``(root, download, path=None)``, then at most keyword-only options with defaults (a corpus of records
    takes ``field=``, from ``data.field``): a dataset is added the same way in every modality."""
    import importlib
    import inspect

    checked = 0
    for modality in available_modalities():
        try:
            sources = importlib.import_module(f"poslab.modalities.{modality}.sources").SOURCES
        except ModuleNotFoundError:  # a modality that generates its data (video) has no sources
            continue
        for name, source in sources.items():
            load = getattr(source, "load", source)
            params = list(inspect.signature(load).parameters.values())
            assert [p.name for p in params[:3]] == ["root", "download", "path"], (modality, name)
            assert params[2].default is None, (modality, name)
            options = params[3:]
            assert all(p.kind is p.KEYWORD_ONLY and p.default is not p.empty for p in options), (modality, name)
            checked += 1
    assert checked >= 12


def test_a_new_modality_providing_steps_does_not_change_where_show_draws_an_encoder(tmp_path, monkeypatch):
    """``poslab show rope`` stays on text, the modality declaring steps as what it shows, even when a modality
    named before it provides steps too (a tie on the fewest fields would pick 'aaa_steps')."""
    import dataclasses

    from poslab.encoders import available_encoders
    from poslab.tools.show import default_modality

    (tmp_path / "modality").mkdir()
    (tmp_path / "modality" / "aaa_steps.yaml").write_text(TOY_YAML)
    monkeypatch.setenv("POSLAB_CONFIG_DIR", str(tmp_path))
    register_modality(dataclasses.replace(TOY, name="aaa_steps"))
    try:
        assert "rope" in available_encoders("aaa_steps")
        assert default_modality("rope") == "text" and default_modality("none") == "text"
        assert default_modality("sincos2d") == "vision"
    finally:
        unregister_modality("aaa_steps")
