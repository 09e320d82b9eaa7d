"""A mistyped key on the command line, found before torch loads.

Composing reads the encoders and the models' constructors, and importing them imports torch: about 2 s on a
laptop CPU before the first check. So each successful composition remembers the key tree of every modality's
schema (:func:`remember_keys`), named by a fingerprint of every file that declares one (poslab's and its
plugins' sources, every config folder's YAML), and the next command line's keys are looked up in it first
(:func:`check_keys`): ``poslab train model.dimm=1`` is one line in well under a second, the same line
composing prints. Only unknown keys are looked for, and nothing is refused without a tree of the current
files: a missing, stale or unreadable tree leaves every check to composing, which checks it all again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import re
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

from poslab import entry_points
from poslab.config.files import config_dirs, find_config, load_yaml
from poslab.config.root import root_schema
from poslab.errors import ConfigError, did_you_mean
from poslab.files import cache_folder, write_json_atomic
from poslab.modalities.registry import available_modalities, get_modality

#: A plain dotted key (``model.dim``); other forms (``+key``, ``~key``) are left to composing.
DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
#: A node's keys: name -> the node below it (``None`` where the schema is open: a mapping, a signature's)
Tree = dict[str, Any]


def check_keys(overrides: Sequence[str]) -> None:
    """Raise the :class:`ConfigError` composing would raise for the first unknown key of ``overrides``."""
    modality = selected_modality(overrides)
    tree = _read(tree_path(modality)) if modality else None
    for item in overrides if tree else ():
        key = item.partition("=")[0].strip()
        if "=" in item and DOTTED.fullmatch(key):
            _walk(tree, key.split("."), "")


def remember_keys() -> None:
    """Keep every modality's key tree for :func:`check_keys` (20 ms once composing has loaded them; only those
    missing for the current files are written; a cache that cannot be written costs only speed)."""
    fingerprint = files_fingerprint()
    for modality in available_modalities():
        path = tree_path(modality, fingerprint)
        if not path.is_file():
            try:
                write_json_atomic(path, key_tree(root_schema(get_modality(modality), dict)))
            except OSError:
                return


def key_tree(schema: type) -> Tree:
    """A dataclass schema's keys, as :func:`poslab.config.checks.check_block` accepts them: its fields in order
    (a dataclass field with its own tree), then the keys it skips (``owned``, ``foreign``), open."""
    hints = typing.get_type_hints(schema, include_extras=True)
    tree: Tree = {"fields": {}, "skipped": [*getattr(schema, "owned", {}), *getattr(schema, "foreign", ())]}
    for field in dataclasses.fields(schema):
        hint = hints[field.name]
        hint = typing.get_args(hint)[0] if typing.get_origin(hint) is Annotated else hint
        tree["fields"][field.name] = key_tree(hint) if dataclasses.is_dataclass(hint) else None
    return tree


def selected_modality(overrides: Sequence[str]) -> str | None:
    """The modality composing will use: the command line's, else the experiment's, else ``train.yaml``'s."""
    chosen = {key.strip(): value.strip() for key, _, value in (item.partition("=") for item in overrides)}
    base = _defaults("train.yaml")
    experiment = chosen.get("experiment", base.get("experiment"))
    found = _defaults(f"experiment/{experiment}.yaml") if experiment and not set("/\\") & set(experiment) else {}
    return chosen.get("modality") or found.get("modality") or base.get("modality")


def tree_path(modality: str, fingerprint: str | None = None) -> Path:
    """``<cache>/config-keys/<modality>-<fingerprint>.json``: the fingerprint changes with any declaring file."""
    return cache_folder() / "config-keys" / f"{modality}-{fingerprint or files_fingerprint()}.json"


def files_fingerprint() -> str:
    """The path, time and size of every file that declares a key (16 ms for poslab's 230 here)."""
    digest = hashlib.sha256()
    roots = [Path(__file__).parents[1], *_plugin_sources()]
    files = [p for r in roots for p in ([r] if r.is_file() else sorted(r.rglob("*.py")))]
    files += [p for d in config_dirs() for p in sorted(d.rglob("*.yaml"))]
    for file in files:
        stat = file.stat()
        digest.update(f"{file}\0{stat.st_mtime_ns}\0{stat.st_size}\n".encode())
    return digest.hexdigest()[:16]


def _plugin_sources() -> list[Path]:
    """Each installed plugin's package folder (or module file): its schemas count in the fingerprint."""
    specs = [importlib.util.find_spec(name) for name in sorted(entry_points.plugin_packages())]
    return [Path(p) for spec in specs if spec for p in (spec.submodule_search_locations or [spec.origin])]


def _read(path: Path) -> Tree | None:
    try:
        tree = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return tree if isinstance(tree, dict) and isinstance(tree.get("fields"), dict) else None


def _defaults(relative: str) -> dict[str, Any]:
    path = find_config(relative)
    try:
        defaults = load_yaml(path).get("defaults") if path else None
    except ConfigError:  # composing says what is wrong with the file
        return {}
    return dict(defaults) if hasattr(defaults, "items") else {}


def _walk(tree: Tree, parts: list[str], prefix: str) -> None:
    """Follow ``parts`` down ``tree`` while it has one; an unknown part is check_block's line."""
    head, fields = parts[0], tree["fields"]
    if head in tree["skipped"]:
        return
    if head not in fields:
        valid = [f"{prefix}{name}" for name in fields]
        raise ConfigError(f"unknown config key '{prefix}{head}'{did_you_mean(f'{prefix}{head}', valid)}")
    if parts[1:] and fields[head]:
        _walk(fields[head], parts[1:], f"{prefix}{head}.")
