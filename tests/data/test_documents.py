"""Corpora of documents (data=jsonl / parquet / txtdir): every 20th document held out for test and the one
before it for validation, and one line for a record, a file or a source that is not what it should be."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from poslab.errors import DataError
from poslab.modalities.text.sources import SOURCES
from poslab.modalities.text.sources.documents import split_documents

DOCS = [f"document {i}" for i in range(40)]


def test_of_every_twenty_documents_the_last_two_are_held_out():
    splits = split_documents(iter(DOCS), "here")
    assert splits.val == "document 18\n\ndocument 38" and splits.test == "document 19\n\ndocument 39"
    assert splits.train.split("\n\n") == [d for i, d in enumerate(DOCS) if i % 20 < 18]


def write_jsonl(path, records) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("kind", ["jsonl", "parquet", "txtdir"])
def test_each_form_reads_the_same_documents(tmp_path, kind):
    if kind == "jsonl":
        path = write_jsonl(tmp_path / "c.jsonl", [{"text": d, "n": 1} for d in DOCS])
    elif kind == "parquet":
        pq.write_table(pa.table({"text": DOCS}), tmp_path / "c.parquet")
        path = str(tmp_path / "c.parquet")
    else:
        for i, d in enumerate(DOCS):
            (tmp_path / f"{i:02d}.txt").write_text(d, encoding="utf-8")
        path = str(tmp_path)
    assert SOURCES[kind](tmp_path, False, path) == split_documents(iter(DOCS), "reference")


def test_a_records_field_is_data_field(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [{"body": d} for d in DOCS])
    assert SOURCES["jsonl"](tmp_path, False, path, field="body").test.startswith("document 19")


@pytest.mark.parametrize(
    ("records", "message"),
    [
        (
            [{"text": d} for d in DOCS[:5]] + [{"body": "x"}],
            r"c.jsonl:6 has no field 'text' \(data.field; it has: body\)",
        ),
        ([{"text": 3}], r"c.jsonl:1: the field 'text' holds int, not text"),
        ([{"text": d} for d in DOCS[:19]], r"c.jsonl holds 19 document\(s\); a corpus needs at least 20"),
    ],
)
def test_a_record_or_a_corpus_that_is_not_right_is_one_line(tmp_path, records, message):
    path = write_jsonl(tmp_path / "c.jsonl", records)
    with pytest.raises(DataError, match=message):
        SOURCES["jsonl"](tmp_path, False, path)


def test_broken_json_and_text_that_is_not_utf8_name_the_file_and_line(tmp_path):
    (tmp_path / "c.jsonl").write_text('{"text": "a"}\n{"text": \n')
    with pytest.raises(DataError, match=r"c.jsonl:2 is not JSON"):
        SOURCES["jsonl"](tmp_path, False, str(tmp_path / "c.jsonl"))
    (tmp_path / "c.jsonl").write_bytes(b'{"text": "caf\xe9"}\n')
    with pytest.raises(DataError, match=r"c.jsonl is not UTF-8 text \(byte \d+"):
        SOURCES["jsonl"](tmp_path, False, str(tmp_path / "c.jsonl"))
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.txt").write_bytes(b"\xff\xfe")
    with pytest.raises(DataError, match=r"a.txt is not UTF-8 text"):
        SOURCES["txtdir"](tmp_path, False, str(folder))


def test_a_parquet_file_without_the_column_or_not_parquet_is_one_line(tmp_path):
    pq.write_table(pa.table({"body": DOCS}), tmp_path / "c.parquet")
    with pytest.raises(DataError, match=r"has no column 'text' \(data.field; it has: body\)"):
        SOURCES["parquet"](tmp_path, False, str(tmp_path / "c.parquet"))
    (tmp_path / "x.parquet").write_text("not parquet")
    with pytest.raises(DataError, match=r"x.parquet is not a Parquet file"):
        SOURCES["parquet"](tmp_path, False, str(tmp_path / "x.parquet"))


@pytest.mark.parametrize(("kind", "path", "message"), [
    ("jsonl", None, "data=jsonl needs data.path="), ("txtdir", "/no/such", "data.path=/no/such does not exist"),
])  # fmt: skip
def test_a_missing_path_is_one_line(tmp_path, kind, path, message):
    with pytest.raises(DataError, match=message):
        SOURCES[kind](tmp_path, False, path)
