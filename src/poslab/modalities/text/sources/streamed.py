"""Corpora larger than memory, read through Hugging Face ``datasets`` streaming: a Hub dataset
(``data=huggingface data.path=<dataset>[:<config>]``, e.g. ``HuggingFaceFW/fineweb-edu:sample-10BT`` or
``deepmind/pg19``), a local folder in a Hub dataset's layout, a remote JSON Lines or Parquet URL (``data=jsonl``
/ ``parquet`` with ``data.path=https://…``, ``s3://…``) and remote ``.txt`` files (``data=txtdir`` with
``data.path=s3://bucket/texts/*.txt``, a file one document).

Such a corpus is never held: its training documents are read part by part (one part per file of the dataset,
torchtitan's split of a stream over its readers) while the preparation's workers tokenize them into shards,
so it trains with ``data.stream=true`` and a subword tokenizer (a character vocabulary would need every
character of the corpus before the first step). The held-out documents follow the document sources' rule
(of every 20 in a part, the 19th is validation and the 20th test), and validation and test are the first
``HELD_OUT_DOCUMENTS`` of those slots in the first part, kept in memory as the other sources' splits are;
the slots past them are read by nobody, so nothing held out is trained on. A BPE tokenizer trains on the
first ``TOKENIZER_SAMPLE_CHARS`` characters of the training documents.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from poslab.errors import DataError, first_line
from poslab.modalities.text.sources import SAMPLES, SOURCES, sample_records

#: Of every ``HELD_OUT_EVERY`` documents (of a corpus, or of a streamed corpus's part), the second-to-last is
#: validation and the last is test.
HELD_OUT_EVERY = 20
#: Documents in each held-out split (FineWeb-Edu's average ~1,000 tokens: ~100K tokens scored).
HELD_OUT_DOCUMENTS = 100
#: Characters of training text a BPE tokenizer is trained on.
TOKENIZER_SAMPLE_CHARS = 1 << 27
OFFLINE = "offline: data=jsonl, parquet or txtdir with data.path=<your files>, or data=huggingface with " \
          "data.path=<a local folder in the dataset's layout>"  # fmt: skip


@dataclass(frozen=True)
class StreamedSplits:
    """A corpus read on demand: ``parts[i]()`` iterates part i's training documents; ``val`` / ``test`` are
    small strings; ``identity`` names what the documents are (the token shards' key and manifest)."""

    parts: list[Callable[[], Iterator[str]]]
    val: str
    test: str
    identity: dict[str, Any] = field(default_factory=dict)

    @property
    def train(self) -> str:
        """The first :data:`TOKENIZER_SAMPLE_CHARS` characters of training text (what a tokenizer trains on)."""
        taken, size = [], 0
        for document in itertools.chain.from_iterable(part() for part in self.parts):
            taken.append(document)
            size += len(document)
            if size >= TOKENIZER_SAMPLE_CHARS:
                break
        return "\n\n".join(taken)[:TOKENIZER_SAMPLE_CHARS]


def split_of(index: int) -> str:
    """``train``, ``val`` or ``test``: where the document read ``index``-th goes (:data:`HELD_OUT_EVERY`)."""
    slot = index % HELD_OUT_EVERY
    return "val" if slot == HELD_OUT_EVERY - 2 else "test" if slot == HELD_OUT_EVERY - 1 else "train"


def training_documents(records: Iterator[dict], field_name: str, where: str) -> Iterator[str]:
    """The training slots' documents of one part."""
    for index, record in enumerate(records):
        if split_of(index) == "train":
            yield document_of(record, field_name, where)


def held_out_documents(records: Iterator[dict], field_name: str, where: str) -> tuple[str, str]:
    """(validation, test): the first :data:`HELD_OUT_DOCUMENTS` documents of each held-out slot of a part."""
    parts: dict[str, list[str]] = {"val": [], "test": []}
    for index, record in enumerate(records):
        split = split_of(index)
        if split != "train":
            parts[split].append(document_of(record, field_name, where))
        if min(map(len, parts.values())) >= HELD_OUT_DOCUMENTS:
            break
    if not parts["test"]:
        raise DataError(f"{where} holds fewer than {HELD_OUT_EVERY} documents in its first part; a corpus needs at "
                        f"least {HELD_OUT_EVERY} (every {HELD_OUT_EVERY}th is held out)")  # fmt: skip
    return "\n\n".join(parts["val"]), "\n\n".join(parts["test"])


def document_of(record: dict, field_name: str, where: str) -> str:
    if field_name not in record:
        raise DataError(f"{where} has no field '{field_name}' (data.field; it has: {', '.join(record)})")
    value = record[field_name]
    if not isinstance(value, str):
        raise DataError(f"{where}: the field '{field_name}' holds {type(value).__name__}, not text")
    return value


def streamed_dataset(path: str, root: Path, builder: str | None = None):
    """``datasets.load_dataset(..., streaming=True)``'s training split: the Hub dataset or local folder ``path``
    (``<dataset>[:<config>]``), or the remote file ``path`` read by ``builder`` (``json``, ``parquet``)."""
    import datasets  # deferred: Hugging Face datasets, ~0.9 s

    name, config = (path, None) if builder else (path.partition(":")[0], path.partition(":")[2] or None)
    where = path if builder else f"data.path={path}"
    try:
        if builder:
            options = {"sample_by": "document"} if builder == "text" else {}  # a .txt file is one document
            return datasets.load_dataset(builder, data_files=path, split="train", streaming=True, **options)
        return datasets.load_dataset(name, config, split="train", streaming=True, cache_dir=str(root / "hf"))
    except Exception as exc:  # noqa: BLE001  (offline, no such dataset or config, a gated one)
        raise DataError(f"{where} could not be opened with Hugging Face datasets ({first_line(exc)[:120]}); "
                        f"{OFFLINE}") from None  # fmt: skip


def streamed_splits(path: str, root: Path, field_name: str, builder: str | None = None) -> StreamedSplits:
    """The corpus at ``path`` as :class:`StreamedSplits` (its held-out documents read now, the rest on demand)."""
    stream = streamed_dataset(path, root, builder)
    where = path if builder else f"data.path={path}"
    count = 1 if builder == "text" else max(1, stream.num_shards)  # files of one document each: read as one part

    def part(index: int) -> Iterator[dict]:
        return iter(stream.shard(num_shards=count, index=index)) if count > 1 else iter(stream)

    def reading(index: int) -> Callable[[], Iterator[str]]:
        return lambda: training_documents(checked(part(index), where), field_name, where)

    val, test = held_out_documents(checked(part(0), where), field_name, where)
    identity = {"path": path, "builder": builder, "field": field_name, "parts": count,
                "held_out": f"{HELD_OUT_EVERY}:{HELD_OUT_DOCUMENTS}"}  # fmt: skip
    return StreamedSplits([reading(i) for i in range(count)], val, test, identity)


def checked(records: Iterator[dict], where: str) -> Iterator[dict]:
    """``records``, with what fails while reading them (the network, a corrupt file) as one line."""
    try:
        yield from records
    except DataError:
        raise
    except Exception as exc:  # noqa: BLE001  (aiohttp, pyarrow, json errors surface here, mid-stream)
        raise DataError(f"{where}: reading failed ({first_line(exc)[:120]}); {OFFLINE}") from None


def load_huggingface(root: Path, download: bool, path: str | None = None, *, field: str = "text") -> StreamedSplits:
    if not path:
        raise DataError("data=huggingface needs data.path=<dataset>[:<config>], e.g. "
                        "HuggingFaceFW/fineweb-edu:sample-10BT, or a local folder in a dataset's layout")  # fmt: skip
    return streamed_splits(path, Path(root), field)


def sample_huggingface(root: Path) -> list[str]:
    """A folder in FineWeb-Edu's layout: the ``sample-10BT`` config's Parquet files under ``sample/10BT/``,
    declared in the dataset card's ``configs``, with its columns."""
    import pyarrow as pa  # deferred: pyarrow, ~0.2 s
    import pyarrow.parquet as pq  # deferred: pyarrow, ~0.2 s

    folder = root / "fineweb-edu"
    (folder / "sample" / "10BT").mkdir(parents=True, exist_ok=True)
    (folder / "README.md").write_text(
        "---\nconfigs:\n- config_name: sample-10BT\n  data_files:\n  - split: train\n    path: sample/10BT/*\n---\n"
    )
    records = sample_records(60)
    for number, chunk in enumerate((records[:40], records[40:])):
        table = pa.table({
            "text": chunk, "id": [f"<urn:uuid:{number}-{i}>" for i in range(len(chunk))],
            "dump": ["CC-MAIN-2024-10"] * len(chunk), "url": [f"https://example.org/{i}" for i in range(len(chunk))],
            "score": [3.1] * len(chunk), "token_count": [len(t.split()) for t in chunk],
        })  # fmt: skip
        pq.write_table(table, folder / "sample" / "10BT" / f"{number:03d}_00000.parquet")
    return [f"data.path={folder}:sample-10BT", "data.stream=true", "data.tokenizer=bpe", "data.vocab_size=300"]


SOURCES.update(huggingface=load_huggingface)
SAMPLES.update(huggingface=sample_huggingface)
