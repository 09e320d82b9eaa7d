"""Corpora of documents: your JSON Lines, Parquet or folder of ``.txt`` files (``data.path``), each document a
record's ``data.field`` (``text`` by default) or a file. A ``data.path`` that is a URL (``https://``, ``s3://``,
``hf://``; for ``.txt`` files a glob) is streamed instead (:mod:`poslab.modalities.text.sources.streamed`).

Held-out documents are unseen in training: of every 20 documents in the order read, the 19th goes to
validation and the 20th to test (5 % each, spread over the corpus, as a streamed corpus of unknown length
can be split); documents are joined by a blank line. A record without the field, a value that is no string,
text that is not UTF-8 or a source with fewer than 20 documents is one line naming the file and the cause.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from poslab.errors import DataError, first_line
from poslab.modalities.text.sources import SAMPLES, SOURCES, TextSplits, sample_records
from poslab.modalities.text.sources.streamed import HELD_OUT_EVERY, split_of, streamed_splits


def split_documents(documents: Iterator[str], where: str) -> TextSplits:
    """Documents in the order read -> train / val / test strings (see the module docstring)."""
    parts: dict[str, list[str]] = {"train": [], "val": [], "test": []}
    count = 0
    for index, document in enumerate(documents):
        parts[split_of(index)].append(document)
        count += 1
    if count < HELD_OUT_EVERY:
        raise DataError(f"{where} holds {count} document(s); a corpus needs at least {HELD_OUT_EVERY} "
                        f"(every {HELD_OUT_EVERY}th is held out)")  # fmt: skip
    return TextSplits(*("\n\n".join(parts[name]) for name in ("train", "val", "test")))


def _path(path: str | None, source: str) -> Path:
    if not path:
        raise DataError(f"data={source} needs data.path=<its file or folder>")
    found = Path(path).expanduser()
    if not found.exists():
        raise DataError(f"data.path={path} does not exist")
    return found


def _text(value, where: str, field: str) -> str:
    if not isinstance(value, str):
        raise DataError(f"{where}: the field '{field}' holds {type(value).__name__}, not text")
    return value


def jsonl_documents(path: Path, field: str) -> Iterator[str]:
    try:
        with path.open(encoding="utf-8") as lines:
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except ValueError as exc:
                    raise DataError(f"{path}:{number} is not JSON ({first_line(exc)})") from None
                if not isinstance(record, dict) or field not in record:
                    keys = ", ".join(record) if isinstance(record, dict) else type(record).__name__
                    raise DataError(f"{path}:{number} has no field '{field}' (data.field; it has: {keys})")
                yield _text(record[field], f"{path}:{number}", field)
    except UnicodeDecodeError as exc:
        raise DataError(f"{path} is not UTF-8 text (byte {exc.start}: {first_line(exc)})") from None


def load_jsonl(root: Path, download: bool, path: str | None = None, *, field: str = "text"):
    if path and "://" in path:  # a remote file: streamed (sources/streamed.py)
        return streamed_splits(path, Path(root), field, builder="json")
    file = _path(path, "jsonl")
    return split_documents(jsonl_documents(file, field), str(file))


def parquet_documents(path: Path, field: str) -> Iterator[str]:
    import pyarrow.parquet as pq  # deferred: pyarrow, ~0.2 s

    try:
        table = pq.ParquetFile(path)
    except Exception as exc:  # noqa: BLE001  (not Parquet, truncated)
        raise DataError(f"{path} is not a Parquet file ({first_line(exc)})") from None
    if field not in table.schema_arrow.names:
        raise DataError(f"{path} has no column '{field}' (data.field; it has: {', '.join(table.schema_arrow.names)})")
    for batch in table.iter_batches(columns=[field]):
        for value in batch.column(0).to_pylist():
            yield _text(value, str(path), field)


def load_parquet(root: Path, download: bool, path: str | None = None, *, field: str = "text"):
    if path and "://" in path:  # a remote file: streamed (sources/streamed.py)
        return streamed_splits(path, Path(root), field, builder="parquet")
    file = _path(path, "parquet")
    return split_documents(parquet_documents(file, field), str(file))


def folder_documents(folder: Path) -> Iterator[str]:
    for file in sorted(folder.rglob("*.txt")):
        try:
            yield file.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise DataError(f"{file} is not UTF-8 text (byte {exc.start}: {first_line(exc)})") from None


def load_txtdir(root: Path, download: bool, path: str | None = None, *, field: str = "text"):
    if path and "://" in path:  # remote files (a glob: s3://bucket/texts/*.txt): streamed, a file one document
        return streamed_splits(path, Path(root), "text", builder="text")
    folder = _path(path, "txtdir")
    if not folder.is_dir():
        raise DataError(f"data=txtdir needs a folder of .txt files; data.path={path} is a file")
    return split_documents(folder_documents(folder), str(folder))


def sample_jsonl(root: Path) -> list[str]:
    path = root / "sample.jsonl"
    path.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(sample_records())))
    return [f"data.path={path}"]


def sample_parquet(root: Path) -> list[str]:
    import pyarrow as pa  # deferred: pyarrow, ~0.2 s
    import pyarrow.parquet as pq  # deferred: pyarrow, ~0.2 s

    path = root / "sample.parquet"
    pq.write_table(pa.table({"text": sample_records()}), path)
    return [f"data.path={path}"]


def sample_txtdir(root: Path) -> list[str]:
    folder = root / "sample-txt"
    folder.mkdir(exist_ok=True)
    for i, text in enumerate(sample_records()):
        (folder / f"{i:03d}.txt").write_text(text, encoding="utf-8")
    return [f"data.path={folder}"]


SOURCES.update(jsonl=load_jsonl, parquet=load_parquet, txtdir=load_txtdir)
SAMPLES.update(jsonl=sample_jsonl, parquet=sample_parquet, txtdir=sample_txtdir)
