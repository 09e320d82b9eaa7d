"""Tokenizers of the text corpora (``data.tokenizer``): each form, trained once, and one line for what cannot
be had offline."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import requests
import tiktoken.load
import torch

from poslab.config.composition import compose
from poslab.errors import ConfigError, DataError
from poslab.modalities.text import tokenizers
from poslab.modalities.text.data import TextDataModule
from poslab.modalities.text.tokenizers import CharTokenizer, build_tokenizer, trained_bpe
from poslab.run.train import train

SAMPLE = "the cat sat on the mat; the hat sat on the cat.\nÉtude à deux: naïve café 🍵\n" * 20


def test_a_byte_level_bpe_merges_the_most_frequent_pair_first(tmp_path):
    """Sennrich et al. (2016), sec. 3.2: each merge joins the most frequent adjacent pair; with one merge
    (257 = 256 bytes + 1) only that pair becomes a token: "ab" here, 4 times as frequent as any other."""
    bpe = trained_bpe("abababab xy\n" * 10, 257, tmp_path)
    assert len(bpe) == 257
    assert len(bpe.ids("abab")) == 2 and len(bpe.ids("ba")) == 2 and len(bpe.ids("xy")) == 2


def test_a_byte_level_bpe_reads_back_any_text_and_is_trained_once(tmp_path, monkeypatch):
    bpe = trained_bpe(SAMPLE, 300, tmp_path)
    unseen = "Zebras 🦓 and ĳ ligatures, never seen in training"
    for text in (SAMPLE[:120], unseen):  # byte level: nothing is unknown
        assert bpe.decode(bpe.encode(text)) == text
    assert len(bpe.encode("the cat sat")) < len("the cat sat")  # merges learned
    (saved,) = tmp_path.glob("bpe-300-*.json")
    monkeypatch.setattr(tokenizers.trainers, "BpeTrainer", lambda **_: pytest.fail("trained again"))
    again = trained_bpe(SAMPLE, 300, tmp_path)
    assert again.ids(SAMPLE[:200]) == bpe.ids(SAMPLE[:200])
    monkeypatch.undo()
    assert trained_bpe(SAMPLE, 280, tmp_path) and len(list(tmp_path.glob("bpe-*.json"))) == 2  # keyed by its size
    saved.write_text('{"truncated":')
    with pytest.raises(DataError, match=rf"^tokenizer {saved} is unreadable .*; remove it to train again$"):
        trained_bpe(SAMPLE, 300, tmp_path)


def test_a_tokenizer_json_in_a_folder_is_read_as_it_was_saved(tmp_path):
    bpe = trained_bpe(SAMPLE, 300, tmp_path / "cache")
    folder = tmp_path / "mine"
    folder.mkdir()
    bpe.tokenizer.save(str(folder / "tokenizer.json"))
    loaded = build_tokenizer(f"hf:{folder}", tmp_path, [SAMPLE], 4096)
    assert loaded.spec == f"hf:{folder}" and loaded.ids(SAMPLE[:200]) == bpe.ids(SAMPLE[:200])
    with pytest.raises(DataError, match="the folder holds no tokenizer.json"):
        build_tokenizer(f"hf:{tmp_path}", tmp_path, [SAMPLE], 4096)


def test_a_hub_tokenizer_without_the_network_is_one_line_naming_the_offline_forms(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # what the Hub's client does with no network, without its retries
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    with pytest.raises(DataError, match=r"^tokenizer hf:gpt2 could not be fetched .*; offline: data.tokenizer=char"):
        build_tokenizer("hf:gpt2", tmp_path, [SAMPLE], 4096)


def test_a_tiktoken_encoding_without_the_network_is_one_line_and_touches_no_environment(tmp_path, monkeypatch):
    def no_network(url: str) -> bytes:
        raise requests.exceptions.ConnectionError(f"cannot reach {url}")

    monkeypatch.setattr(tiktoken.load, "read_file", no_network)
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)
    with pytest.raises(DataError, match=r"^tokenizer tiktoken:gpt2 needs the network once .*; offline: "):
        build_tokenizer("tiktoken:gpt2", tmp_path, [SAMPLE], 4096)
    assert "TIKTOKEN_CACHE_DIR" not in __import__("os").environ
    with pytest.raises(ConfigError, match="tiktoken:gpt5: no such encoding; valid: .*cl100k_base"):
        build_tokenizer("tiktoken:gpt5", tmp_path, [SAMPLE], 4096)


def test_char_takes_the_characters_of_every_split():
    char = build_tokenizer("char", Path("unused"), ["ba", "c", "a"], 4096)
    assert isinstance(char, CharTokenizer) and char.chars == "abc"
    assert torch.equal(char.encode("cab"), torch.tensor([2, 0, 1]))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["data.tokenizer=wordpiece"], "data.tokenizer='wordpiece' is not a tokenizer; valid: char, bpe, tiktoken:"),
        (["data.tokenizer=hf:"], "config key 'data.tokenizer' expects str, got {'hf': None}"),
        (["data.tokenizer='hf:'"], "data.tokenizer='hf:' is not a tokenizer"),
        (["data=copy", "task.name=sequence", "data.tokenizer=bpe"], "data=copy makes its own tokens"),
        (["data.tokenizer=bpe", "data.vocab_size=100"], "config key 'data.vocab_size' must be >= 256, got 100"),
    ],
)
def test_a_bad_tokenizer_setting_is_one_line(overrides, message):
    with pytest.raises(ConfigError, match=message):
        compose(["modality=text", *overrides])


def test_a_corpus_trains_on_bpe_tokens(tiny_text, tmp_path, corpus_file):
    """The data module tokenizes every split with the trained BPE (its vocabulary sizes the model); a run
    on it trains and tests; every held-out token decodes back to the text."""
    overrides = [*tiny_text, "data.tokenizer=bpe", "data.vocab_size=300", f"data.root={tmp_path / 'data'}"]
    cfg = compose(overrides)
    datamodule = TextDataModule(cfg.data)
    datamodule.setup()
    assert datamodule.vocab_size <= 300 and datamodule.model_facts() == {"vocab_size": datamodule.vocab_size}
    text = corpus_file.read_text()
    val = datamodule.vocab.decode(datamodule.splits["val"])
    assert val and val in text and len(datamodule.splits["val"]) < len(val)
    summary = train(cfg)
    assert summary["metrics"]["test/bpt"] == pytest.approx(summary["metrics"]["test/loss"] / math.log(2), rel=1e-5)
    assert "test/bpc" not in summary["metrics"]  # bits per token: a BPE token is no character
    assert len(list((tmp_path / "data" / "tokenizers").glob("bpe-300-*.json"))) == 1


def test_a_read_only_data_cache_trains_the_bpe_and_says_it_could_not_keep_it(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("a file where the tokenizers folder would be")
    with pytest.warns(UserWarning, match=f"could not keep the trained tokenizer in {blocked}"):
        bpe = trained_bpe(SAMPLE, 300, blocked)
    assert bpe.decode(bpe.encode(SAMPLE[:50])) == SAMPLE[:50]
