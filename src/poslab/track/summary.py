"""``summary.json``: one typed, versioned record of a finished run, made and read only here.

A run writes it last (atomically); reports and comparisons are built from these files alone, so they work
offline and after the fact. :class:`RunSummary` is the record: ``train``/``evaluate`` build one,
:func:`read_summary` reads one back (older files too), and it reads as its JSON does
(``summary["metrics"]``) as well as by attribute (``summary.metrics``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from poslab.files import write_json_atomic

#: The version of the file's shape. 1: files written before the field existed (same keys otherwise).
SCHEMA_VERSION = 2
#: Top-level numbers that a logger also holds under these keys (besides every entry of ``metrics``).
LOGGED_FIELDS = ("num_params", "wall_time_s")
#: What a report cannot do without.
REQUIRED = ("kind", "modality", "encoder", "seed", "config", "metrics")


@dataclass
class RunSummary(Mapping):
    """Everything a finished run reports (the ``summary.json`` keys, docs/comparing.md)."""

    kind: str  # train | eval
    modality: str
    encoder: str
    seed: int
    config: dict[str, Any]  # the resolved config
    metrics: dict[str, float]  # final values under their logged keys
    run_name: str = ""
    run_dir: str = ""
    task: str = ""
    tables: dict[str, dict] = field(default_factory=dict)  # key -> {"columns": [...], "rows": [[...]]}
    figures: dict[str, str] = field(default_factory=dict)  # key -> PNG path relative to the run
    history: dict[str, list] = field(default_factory=dict)  # key -> [[step, value], ...]
    curves: dict[str, list[str]] = field(default_factory=dict)  # axis -> keys logged against it
    checkpoints: dict[str, str | None] = field(default_factory=dict)
    checkpoint_sha256: dict[str, str | None] = field(default_factory=dict)
    num_params: int | None = None
    wall_time_s: float | None = None
    wandb: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    created: str = ""
    schema_version: int = SCHEMA_VERSION
    path: str | None = field(default=None, compare=False)  # where it was read from (not written)

    # -- as a mapping: the JSON's keys ----------------------------------------------------------
    def _keys(self) -> list[str]:
        return [f.name for f in fields(self) if f.name != "path"]

    def __getitem__(self, key: str) -> Any:
        if key not in self._keys():
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())

    # -- what loggers hold ------------------------------------------------------------------------
    def logged_scalars(self) -> dict[str, float]:
        """Every number a logger holds for this run under the same key: each metric and :data:`LOGGED_FIELDS`."""
        out = {k: v for k, v in self.metrics.items() if isinstance(v, int | float)}
        out.update({k: getattr(self, k) for k in LOGGED_FIELDS if getattr(self, k) is not None})
        return out

    # -- files ---------------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        payload = asdict(self)
        payload.pop("path")
        return payload

    def write(self, run_dir: str | Path) -> Path:
        """``<run_dir>/summary.json``, replaced atomically."""

        return write_json_atomic(Path(run_dir) / "summary.json", self.to_json())

    @classmethod
    def from_json(cls, payload: Any, path: str | Path | None = None) -> RunSummary:
        """The record of a parsed ``summary.json``; ``ValueError`` names what makes it unusable."""
        if not isinstance(payload, dict):
            raise ValueError("not a JSON object")
        missing = [k for k in REQUIRED if k not in payload]
        if missing:
            raise ValueError(f"no {', '.join(missing)}")
        version = payload.get("schema_version", 1)
        if not isinstance(version, int) or version > SCHEMA_VERSION:
            raise ValueError(f"schema_version {version!r} is newer than this poslab reads ({SCHEMA_VERSION})")
        known = {f.name for f in fields(cls)} - {"path"}
        values = {k: v for k, v in payload.items() if k in known}
        values["schema_version"] = SCHEMA_VERSION  # version 1 had the same keys: read as the current shape
        return cls(**values, path=str(path) if path is not None else None)


#: The keys of every ``summary.json`` (documented in docs/comparing.md).
SUMMARY_KEYS = tuple(f.name for f in fields(RunSummary) if f.name != "path")


def read_summary(path: str | Path) -> RunSummary:
    """A ``summary.json``; unreadable or unusable is ``ValueError`` / ``OSError`` naming why."""
    path = Path(path)
    try:
        payload = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"unreadable ({type(exc).__name__})") from None
    return RunSummary.from_json(payload, path)
