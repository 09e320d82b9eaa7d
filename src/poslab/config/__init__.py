"""Configuration: a run's config composed from the YAMLs and the command line, and the schemas, options and
ranges that check it.

``from poslab.config import compose`` is the entry point (also ``recompose``, ``validate``, ``option_rows``,
``to_dict``, ``to_yaml``, ``config_hash``). They load on first use: the encoders declare their options with this
package's :mod:`~poslab.config.ranges`, and composing a config reads the encoders, so importing the package
itself must not compose anything.
"""

from __future__ import annotations

import importlib
import importlib.util
import warnings
from typing import Any

#: The names ``poslab.config`` offers, and the module that defines them.
EXPORTS = {
    name: "poslab.config.composition"
    for name in ("compose", "recompose", "validate", "option_rows", "to_dict", "to_yaml", "config_hash")
}
#: Where the rest of what ``poslab.config`` held as one module now lives (reached with a DeprecationWarning).
FORMERLY_HERE = ("poslab.config.files", "poslab.config.composition")


def __getattr__(name: str) -> Any:
    if name in EXPORTS:
        return getattr(importlib.import_module(EXPORTS[name]), name)
    if name.startswith("_") or importlib.util.find_spec(f"{__name__}.{name}") is not None:
        raise AttributeError(name)  # a submodule (``from poslab.config import ranges``): the import system loads it
    for module in FORMERLY_HERE:
        found = importlib.import_module(module)
        if hasattr(found, name):
            warnings.warn(f"poslab.config.{name} moved to {module}.{name}", DeprecationWarning, stacklevel=2)
            return getattr(found, name)
    raise AttributeError(f"module 'poslab.config' has no attribute {name!r}")
