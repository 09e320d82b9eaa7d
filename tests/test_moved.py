"""Modules that moved keep their old import paths: the same module object, a DeprecationWarning naming the new
place, and ``python -m <old path>`` still runs."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import poslab
from poslab.moved import MOVED, new_path

PACKAGE = Path(poslab.__file__).parent


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_imports_the_module_at_its_new_place_and_warns(old):
    new = importlib.import_module(MOVED[old])
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {MOVED[old]}"):
        module = importlib.import_module(old)
    assert module is new and module.__spec__.name == MOVED[old]  # one module, its own spec kept
    assert not (PACKAGE / f"{old.removeprefix('poslab.').replace('.', '/')}.py").exists()  # the old file is gone


def test_a_moved_package_s_submodules_are_not_loaded_twice():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from poslab.scaffolds.modality.record import MODALITY
    from poslab.tools.scaffolds.modality.record import MODALITY as AT_ITS_PLACE

    assert MODALITY is AT_ITS_PLACE
    assert new_path("poslab.scaffolds.modality.record") == "poslab.tools.scaffolds.modality.record"
    assert new_path("poslab.schemas") is None and new_path("poslab.encoders.base") is None


def test_python_dash_m_with_an_old_path_runs_the_new_module():
    done = subprocess.run([sys.executable, "-m", "poslab.gpu_check", "--help"], capture_output=True, text=True)
    assert done.returncode == 0 and "gpu-check" in done.stdout
    assert "poslab.gpu_check moved to poslab.tools.gpu_check" in done.stderr


def test_the_config_package_offers_compose_and_names_where_the_rest_went():
    from poslab.config import compose
    from poslab.config.composition import compose as defined

    assert compose is defined
    with pytest.warns(DeprecationWarning, match="poslab.config.group_choices moved to poslab.config.files"):
        from poslab.config import group_choices  # noqa: F401
    with pytest.raises(AttributeError):
        poslab.config.no_such_name  # noqa: B018
