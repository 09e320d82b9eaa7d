"""Configuration: a run's config composed from the YAMLs and the command line, and checked once.

``from poslab.config import compose`` (also ``recompose``, ``validate``, ``to_dict``, ``to_yaml``). They load on
first use: the encoders declare their options with this package's :mod:`~poslab.config.ranges`, and composing
reads the encoders, so importing the package composes nothing.
"""

from __future__ import annotations

import importlib
import importlib.util
import warnings
from typing import Any

EXPORTS = {"compose": "composition", "recompose": "composition", "to_dict": "composition", "to_yaml": "composition",
           "validate": "validation"}  # fmt: skip
#: Where the rest of what ``poslab.config`` held as one module went (reached with a DeprecationWarning).
FORMERLY_HERE = ("poslab.config.files", "poslab.config.composition", "poslab.config.checks", "poslab.run.policy",
                 "poslab.tools.options")  # fmt: skip


def __getattr__(name: str) -> Any:
    if name in EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{EXPORTS[name]}"), name)
    if name.startswith("_") or importlib.util.find_spec(f"{__name__}.{name}") is not None:
        raise AttributeError(name)  # a submodule (``from poslab.config import ranges``): the import system loads it
    for module in FORMERLY_HERE:
        found = importlib.import_module(module)
        if hasattr(found, name):
            warnings.warn(f"poslab.config.{name} moved to {module}.{name}", DeprecationWarning, stacklevel=2)
            return getattr(found, name)
    raise AttributeError(f"module 'poslab.config' has no attribute {name!r}")
