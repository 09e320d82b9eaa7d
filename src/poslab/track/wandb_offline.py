"""``poslab read-wandb DIR``: what W&B wrote for an offline run, read back from its ``run-*.wandb`` file (wandb
ships no reader): the run (id, project, group, job type, tags), its config, its summary and, with ``--history
KEY``, a logged series — what a run will show in W&B once ``wandb sync`` uploads it, checked without a server.

The file is a LevelDB-style log (github.com/google/leveldb/blob/main/doc/log_format.md) behind a 7-byte
header (``:W&B``, a 2-byte magic, a version byte): 32 KiB blocks of chunks, each a 7-byte header
(CRC-32, little-endian length, type FULL / FIRST / MIDDLE / LAST) and its bytes; a chunk never starts in
a block's last 6 bytes (zero padding). Joined chunks are one ``wandb_internal_pb2.Record``.
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BLOCK = 32768
CHUNK_HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: str | Path) -> list:
    """Every record of a ``.wandb`` file, in order; a chunk whose CRC does not match raises."""
    from wandb.proto import wandb_internal_pb2 as pb  # deferred: W&B, ~0.8 s

    data = Path(path).read_bytes()
    if data[:4] != b":W&B":
        raise ValueError(f"{path} is not a W&B run file (header {data[:4]!r})")
    out, parts, pos = [], [], 7
    while pos + CHUNK_HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < CHUNK_HEADER:  # the block's trailer
            pos += left
            continue
        crc, length, kind = struct.unpack("<IHB", data[pos : pos + CHUNK_HEADER])
        if kind == 0:  # zero padding to the end of the block (or of a file still being written)
            pos += left
            continue
        body = data[pos + CHUNK_HEADER : pos + CHUNK_HEADER + length]
        if zlib.crc32(body, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF != crc:
            raise ValueError(f"{path}: bad checksum at byte {pos}")
        pos += CHUNK_HEADER + length
        parts.append(body)
        if kind in (FULL, LAST):
            record = pb.Record()
            record.ParseFromString(b"".join(parts))
            out.append(record)
            parts = []
    return out


def _path(item) -> list[str]:
    """An item's key: one name, or a path into nested values (a logged table's ``path``, ``nrows`` …)."""
    return [item.key] if item.key else list(item.nested_key)


def _set(target: dict, item) -> None:
    *parents, last = _path(item)
    for name in parents:
        target = target.setdefault(name, {})
    target[last] = json.loads(item.value_json)


def _remove(target: dict, item) -> None:
    *parents, last = _path(item)
    for name in parents:
        target = target.get(name, {})
    target.pop(last, None)


@dataclass
class OfflineRun:
    """The parts of an offline run that poslab's tests check."""

    summary: dict[str, Any] = field(default_factory=dict)  # the run summary as W&B keeps it
    history: list[dict[str, Any]] = field(default_factory=list)  # one dict per logged step
    metrics: list[Any] = field(default_factory=list)  # define_metric records
    artifacts: list[Any] = field(default_factory=list)  # artifact records (name, type, manifest)
    config: dict[str, Any] = field(default_factory=dict)
    run: Any = None  # the run record: project, entity, group, tags, job_type

    def metric(self, name: str):
        """The last definition of ``name`` (exact name, or glob)."""
        found = [m for m in self.metrics if name in (m.name, m.glob_name)]
        return found[-1] if found else None

    def logged(self, key: str) -> list[Any]:
        return [row[key] for row in self.history if key in row]


def read_offline_run(run_dir: str | Path) -> OfflineRun:
    """``run_dir``: an ``offline-run-*`` folder (or the run directory above a single one)."""
    run_dir = Path(run_dir)
    if not run_dir.name.startswith("offline-run-"):
        found = sorted(run_dir.rglob("offline-run-*"))
        if not found:
            raise ValueError("no offline-run-* folder under it")
        if len(found) > 1:
            raise ValueError(
                f"{len(found)} offline-run-* folders under it ({', '.join(p.name for p in found)}); name one"
            )
        (run_dir,) = found
    files = sorted(run_dir.glob("run-*.wandb"))
    if len(files) != 1:
        raise ValueError(f"{len(files)} run-*.wandb files in {run_dir}")
    (path,) = files
    out = OfflineRun()
    for record in records(path):
        kind = record.WhichOneof("record_type")
        if kind == "summary":
            for item in record.summary.update:
                _set(out.summary, item)
            for item in record.summary.remove:
                _remove(out.summary, item)
        elif kind == "history":
            row: dict[str, Any] = {}
            for item in record.history.item:
                _set(row, item)
            out.history.append(row)
        elif kind == "metric":
            out.metrics.append(record.metric)
        elif kind == "artifact":
            out.artifacts.append(record.artifact)
        elif kind == "config":
            for item in record.config.update:
                _set(out.config, item)
        elif kind == "run":
            out.run = record.run
            for item in record.run.config.update:  # what wandb.init(config=…) set
                _set(out.config, item)
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="poslab read-wandb", description=__doc__.splitlines()[0])
    parser.add_argument("dir", help="an offline-run-* folder, or a run directory holding one")
    parser.add_argument("--history", nargs="*", default=[], metavar="KEY", help="print these logged series too")
    args = parser.parse_args(argv)
    try:
        offline = read_offline_run(args.dir)
    except (ValueError, OSError) as exc:  # no offline run there, several, or a damaged file
        print(f"poslab read-wandb: error: {args.dir}: {exc}", file=sys.stderr)
        return 2
    run = offline.run
    shown = {
        "run": {"id": run.run_id, "project": run.project, "entity": run.entity, "group": run.run_group,
                "job_type": run.job_type, "tags": list(run.tags)} if run is not None else None,
        "config": offline.config,
        "summary": offline.summary,
        "history": {key: offline.logged(key) for key in args.history},
    }  # fmt: skip
    print(json.dumps(shown, indent=1, default=str))
    return 0
