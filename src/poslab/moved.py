"""Modules that moved when the package was laid out by job: an old import path keeps working, as the module at
its new place, with a DeprecationWarning naming it.

``import poslab.plugins``, ``from poslab.ranges import AT_LEAST_1`` and ``python -m poslab.gpu_check`` all reach
the module now at the new path (the same module object, not a copy). Plugins and forks written against the old
layout keep running; update their imports to the new paths at leisure.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import CodeType, ModuleType

#: Old module path -> new module path (a package's old path covers its submodules).
MOVED = {
    "poslab.callback_presets": "poslab.run.presets",
    "poslab.callbacks": "poslab.run.callbacks",
    "poslab.checkpoint_io": "poslab.run.checkpoints",
    "poslab.cluster": "poslab.run.cluster",
    "poslab.compare": "poslab.study.compare",
    "poslab.config_files": "poslab.config.files",
    "poslab.dashboard": "poslab.study.dashboard",
    "poslab.denormals": "poslab.run.denormals",
    "poslab.docs": "poslab.tools.docs",
    "poslab.expectations": "poslab.study.expectations",
    "poslab.gpu_check": "poslab.tools.gpu_check",
    "poslab.grid": "poslab.study.grid",
    "poslab.locks": "poslab.run.locks",
    "poslab.loggers": "poslab.track.loggers",
    "poslab.memory": "poslab.run.memory",
    "poslab.offsets": "poslab.positions.offsets",
    "poslab.optimizers": "poslab.tasks.optimizers",
    "poslab.option_blocks": "poslab.config.schema",
    "poslab.options": "poslab.config.options",
    "poslab.plots": "poslab.track.plots",
    "poslab.plugins": "poslab.modalities.registry",
    "poslab.policy": "poslab.run.policy",
    "poslab.precision": "poslab.nn.precision",
    "poslab.ranges": "poslab.config.ranges",
    "poslab.report": "poslab.study.report",
    "poslab.report_figures": "poslab.study.report_figures",
    "poslab.resume": "poslab.run.resume",
    "poslab.rundir": "poslab.run.rundir",
    "poslab.scaffold": "poslab.tools.scaffold",
    "poslab.scaffolds": "poslab.tools.scaffolds",
    "poslab.schema": "poslab.config.schema",
    "poslab.show": "poslab.tools.show",
    "poslab.summary": "poslab.track.summary",
    "poslab.sweep": "poslab.study.sweep",
    "poslab.timestamps": "poslab.positions.timestamps",
    "poslab.train": "poslab.run.train",
    "poslab.trainer_arguments": "poslab.run.trainer_arguments",
    "poslab.trainer_schema": "poslab.run.trainer_options",
    "poslab.workers": "poslab.study.workers",
}


def new_path(name: str) -> str | None:
    """Where the module ``name`` lives now, or None when it did not move."""
    for old, new in MOVED.items():
        if name == old or name.startswith(f"{old}."):
            return new + name[len(old) :]
    return None


class MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old path first (before the file system, so a moved package's submodules are never loaded twice)
    and hands over the module at its new path."""

    def find_spec(self, name: str, path=None, target=None) -> importlib.machinery.ModuleSpec | None:
        new = new_path(name)
        if new is None:
            return None
        real = importlib.util.find_spec(new)
        return importlib.machinery.ModuleSpec(name, self, is_package=bool(real and real.submodule_search_locations))

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = new_path(spec.name)
        warnings.warn(f"{spec.name} moved to {new}; import it from there", DeprecationWarning, stacklevel=2)
        module = importlib.import_module(new)
        spec.loader_state = module.__spec__  # the import system overwrites __spec__ next: exec_module restores it
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = module.__spec__.loader_state

    def get_code(self, name: str) -> CodeType | None:
        """What ``python -m <old path>`` runs: the new module's code."""
        new = new_path(name)
        print(f"note: {name} moved to {new}; run python -m {new}", file=sys.stderr)
        return importlib.util.find_spec(new).loader.get_code(new)


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, MovedModules) for f in sys.meta_path):
        sys.meta_path.insert(0, MovedModules())
