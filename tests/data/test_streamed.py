"""Corpora read through Hugging Face datasets streaming: a dataset in FineWeb-Edu's layout, a remote JSON Lines
file served over HTTP here, and what a streamed corpus refuses."""

from __future__ import annotations

import functools
import http.server
import json
import threading
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from poslab.config.composition import compose
from poslab.data import build_datamodule
from poslab.errors import ConfigError, DataError
from poslab.modalities.text.sources import sample_records
from poslab.modalities.text.sources.streamed import HELD_OUT_EVERY, sample_huggingface

BASE = ["modality=text", "data.download=false", "data.context=16", "data.eval_tokens=256", "data.workers=2"]


def datamodule(root: Path, *overrides: str):
    module = build_datamodule(compose([*BASE, f"data.root={root}", *overrides]))
    module.prepare_data()
    module.setup("fit")
    return module


@pytest.fixture
def fineweb(tmp_path) -> tuple[Path, list[str]]:
    root = tmp_path / "data"
    root.mkdir()
    return root, ["data=huggingface", *sample_huggingface(root)]


def test_a_dataset_in_fineweb_edus_layout_is_prepared_part_by_part_with_the_held_out_rule(fineweb):
    root, overrides = fineweb
    module = datamodule(root, *overrides)
    files = sorted((root / "fineweb-edu" / "sample" / "10BT").glob("*.parquet"))
    parts = [pq.read_table(f).column("text").to_pylist() for f in files]
    # the rule written out: of every 20 documents of a part, the 19th is validation and the 20th test
    train = [d for part in parts for i, d in enumerate(part) if i % HELD_OUT_EVERY < HELD_OUT_EVERY - 2]
    val = [d for i, d in enumerate(parts[0]) if i % HELD_OUT_EVERY == HELD_OUT_EVERY - 2]
    test = [d for i, d in enumerate(parts[0]) if i % HELD_OUT_EVERY == HELD_OUT_EVERY - 1]
    manifest = json.loads((Path(module.shards) / "manifest.json").read_text())
    assert manifest["parts"] == 2 and manifest["tokenizer"] == "bpe"
    assert manifest["source"]["stream"]["path"].endswith("fineweb-edu:sample-10BT")
    assert manifest["tokens"] == sum(len(module.vocab.ids(d)) for d in train)
    assert module.splits["val"].tolist() == module.vocab.ids("\n\n".join(val))
    assert module.splits["test"].tolist() == module.vocab.ids("\n\n".join(test))
    batch = next(iter(module.train_dataloader()))
    assert batch.shape == (module.cfg.batch_size, 16 + 1)  # windows of context + 1 tokens


def test_a_streamed_corpus_needs_the_token_stream_and_a_subword_tokenizer(fineweb):
    root, overrides = fineweb
    with pytest.raises(ConfigError, match="is streamed, never held: it trains with data.stream=true"):
        datamodule(root, *overrides, "data.stream=false")
    with pytest.raises(ConfigError, match="got data.stream=True, data.tokenizer=char"):
        datamodule(root, *overrides, "data.tokenizer=char")


def test_a_missing_field_and_a_dataset_out_of_reach_are_one_line(fineweb, monkeypatch):
    root, overrides = fineweb
    with pytest.raises(DataError, match="has no field 'body' \\(data.field; it has: text, id, dump"):
        datamodule(root, *overrides, "data.field=body")
    import datasets
    import huggingface_hub.constants

    for module in (datasets.config, huggingface_hub.constants):  # read once, at import: HF_HUB_OFFLINE=1 as set
        monkeypatch.setattr(module, "HF_HUB_OFFLINE", True)  # the Hub call is the one that needs the network
    with pytest.raises(DataError) as raised:
        datamodule(root, "data=huggingface", "data.path=HuggingFaceFW/fineweb-edu:sample-10BT", "data.stream=true",
                   "data.tokenizer=bpe")  # fmt: skip
    line = str(raised.value)
    assert "\n" not in line and line.startswith("data.path=HuggingFaceFW/fineweb-edu:sample-10BT could not be opened")
    assert "offline: data=jsonl, parquet or txtdir" in line


@pytest.fixture
def served(tmp_path):
    """A folder served over HTTP on this machine (a remote file's real path, through fsspec's HTTP reader)."""
    folder = tmp_path / "www"
    folder.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield folder, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_a_remote_jsonl_file_streams_into_shards(served, tmp_path):
    folder, url = served
    records = sample_records(40)
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in records))
    module = datamodule(tmp_path / "data", "data=jsonl", f"data.path={url}/corpus.jsonl", "data.stream=true",
                        "data.tokenizer=bpe", "data.vocab_size=300")  # fmt: skip
    train = [d for i, d in enumerate(records) if i % HELD_OUT_EVERY < HELD_OUT_EVERY - 2]
    manifest = json.loads((Path(module.shards) / "manifest.json").read_text())
    assert manifest["tokens"] == sum(len(module.vocab.ids(d)) for d in train)
    with pytest.raises(DataError, match="could not be opened|reading failed"):
        datamodule(tmp_path / "data", "data=jsonl", f"data.path={url}/missing.jsonl", "data.stream=true",
                   "data.tokenizer=bpe", "data.vocab_size=300")  # fmt: skip


def test_remote_txt_files_stream_in_path_order_a_file_one_document(tmp_path):
    """A glob URL (here file://, the same fsspec path as s3:// or hf://) of .txt files, each a document."""
    folder = tmp_path / "texts"
    folder.mkdir()
    records = sample_records(40)
    for i, text in enumerate(records):
        (folder / f"{i:03d}.txt").write_text(text, encoding="utf-8")
    module = datamodule(tmp_path / "data", "data=txtdir", f"data.path=file://{folder}/*.txt", "data.stream=true",
                        "data.tokenizer=bpe", "data.vocab_size=300")  # fmt: skip
    train = [d for i, d in enumerate(records) if i % HELD_OUT_EVERY < HELD_OUT_EVERY - 2]
    test = [d for i, d in enumerate(records) if i % HELD_OUT_EVERY == HELD_OUT_EVERY - 1]
    assert json.loads((Path(module.shards) / "manifest.json").read_text())["tokens"] == sum(
        len(module.vocab.ids(d)) for d in train
    )
    assert module.splits["test"].tolist() == module.vocab.ids("\n\n".join(test))


def test_a_tokenizer_that_trains_on_nothing_reads_no_training_text(fineweb, tmp_path, monkeypatch):
    """``hf:<folder>`` (as ``tiktoken:``) needs no sample of the corpus: reading one would fetch up to 128 M
    characters of a Hub dataset for nothing."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    from poslab.modalities.text.sources.streamed import StreamedSplits

    root, overrides = fineweb
    folder = tmp_path / "tok"
    folder.mkdir()
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(sample_records(5), trainer=trainer)
    tokenizer.save(str(folder / "tokenizer.json"))

    def unread(self):
        raise AssertionError("the training sample was read")

    monkeypatch.setattr(StreamedSplits, "train", property(unread))
    module = datamodule(root, *overrides, f"data.tokenizer=hf:{folder}")
    assert module.vocab.spec == f"hf:{folder}" and len(module.splits["val"]) > 0
