"""Tokenizers, a data option of every text corpus (``data.tokenizer``).

* ``char`` (the default): the corpus's characters, every split's, so no held-out character is unknown.
* ``bpe``: a byte-level BPE (GPT-2's pre-tokenisation and byte alphabet; Radford et al. 2019, sec. 2.2) trained
  with Hugging Face ``tokenizers`` on the training split to ``data.vocab_size`` tokens. Trained once: it is kept
  under ``<data.root>/tokenizers/`` named by a digest of what it was trained on (the text, the size, the
  library's version), so every run and every evaluation of the same data reads the same one.
* ``tiktoken:<encoding>`` (``gpt2``, ``cl100k_base``, ``o200k_base``): OpenAI's encodings, downloaded once by
  tiktoken into ``<data.root>/tiktoken``.
* ``hf:<folder or repo>``: a ``tokenizer.json`` from a local folder, or from the Hugging Face Hub (downloaded
  once into ``<data.root>/tokenizers/hub``).

One that needs the network and has none ends in one line naming it and the offline alternatives.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from collections.abc import Sequence
from pathlib import Path

import tiktoken
import tokenizers
import torch
from huggingface_hub import hf_hub_download
from tokenizers import decoders, models, pre_tokenizers, trainers

from poslab.errors import ConfigError, DataError, first_line
from poslab.files import write_text_atomic

#: The forms ``data.tokenizer`` takes, as its error lines list them.
FORMS = "char, bpe, tiktoken:<encoding> (gpt2, cl100k_base, o200k_base), hf:<folder or repo>"
OFFLINE = "offline: data.tokenizer=char or bpe, or hf:<a folder holding tokenizer.json>"


class Tokenizer:
    """Text <-> token ids. ``spec``: the ``data.tokenizer`` value it was made from."""

    spec: str = ""

    def encode(self, text: str) -> torch.Tensor:
        return torch.tensor(self.ids(text), dtype=torch.long)

    def ids(self, text: str) -> list[int]:
        raise NotImplementedError

    def decode(self, ids: Sequence[int] | torch.Tensor) -> str:
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError

    def fingerprint(self) -> str:
        """What the ids mean, as a digest: two tokenizers with one fingerprint give every text the same ids."""
        return hashlib.sha256(self.describe().encode()).hexdigest()[:16]

    def describe(self) -> str:
        raise NotImplementedError


class CharTokenizer(Tokenizer):
    """Characters <-> ids, in code-point order."""

    spec = "char"

    def __init__(self, chars: str) -> None:
        self.chars = chars
        self.index = {c: i for i, c in enumerate(chars)}

    @classmethod
    def of(cls, texts: Sequence[str]) -> CharTokenizer:
        return cls("".join(sorted(set().union(*map(set, texts)))))

    def ids(self, text: str) -> list[int]:
        try:
            return [self.index[c] for c in text]
        except KeyError as exc:
            raise DataError(f"character {exc.args[0]!r} is not in the vocabulary") from None

    def decode(self, ids: Sequence[int] | torch.Tensor) -> str:
        return "".join(self.chars[int(i)] for i in ids)

    def describe(self) -> str:
        return f"char\0{self.chars}"

    def __len__(self) -> int:
        return len(self.chars)


class HFTokenizer(Tokenizer):
    """A Hugging Face ``tokenizers.Tokenizer`` (a trained BPE, or a ``tokenizer.json``)."""

    def __init__(self, spec: str, tokenizer) -> None:
        self.spec, self.tokenizer = spec, tokenizer

    def ids(self, text: str) -> list[int]:
        return self.tokenizer.encode(text).ids

    def decode(self, ids: Sequence[int] | torch.Tensor) -> str:
        return self.tokenizer.decode([int(i) for i in ids])

    def describe(self) -> str:
        return self.tokenizer.to_str()

    def __len__(self) -> int:
        return self.tokenizer.get_vocab_size()


class TiktokenTokenizer(Tokenizer):
    """An OpenAI encoding; special tokens are text like any other (a corpus may contain ``<|endoftext|>``)."""

    def __init__(self, spec: str, encoding) -> None:
        self.spec, self.encoding = spec, encoding

    def ids(self, text: str) -> list[int]:
        return self.encoding.encode_ordinary(text)

    def decode(self, ids: Sequence[int] | torch.Tensor) -> str:
        return self.encoding.decode([int(i) for i in ids])

    def describe(self) -> str:
        return f"tiktoken\0{self.encoding.name}\0{self.encoding.n_vocab}"

    def __len__(self) -> int:
        return self.encoding.n_vocab


def check_spec(spec: str) -> str | None:
    """A message for a ``data.tokenizer`` value of no known form, or None."""
    kind, _, name = spec.partition(":")
    if spec in ("char", "bpe") or (kind in ("tiktoken", "hf") and name):
        return None
    return f"data.tokenizer={spec!r} is not a tokenizer; valid: {FORMS}"


def build_tokenizer(spec: str, root: Path, texts: Sequence[str], vocab_size: int) -> Tokenizer:
    """The tokenizer ``spec`` names; ``texts``: the splits (training split first), which ``char`` takes its
    characters from and ``bpe`` trains on (the training split only)."""
    kind, _, name = spec.partition(":")
    if spec == "char":
        return CharTokenizer.of(texts)
    if spec == "bpe":
        return trained_bpe(texts[0], vocab_size, Path(root) / "tokenizers")
    if kind == "tiktoken":
        return tiktoken_encoding(name, Path(root) / "tiktoken")
    if kind == "hf":
        return hf_tokenizer(name, Path(root) / "tokenizers" / "hub")
    raise ConfigError(check_spec(spec))


def trained_bpe(text: str, vocab_size: int, folder: Path) -> HFTokenizer:
    """A byte-level BPE of ``vocab_size`` tokens trained on ``text``, or the one trained on it before."""

    key = hashlib.sha256(f"{tokenizers.__version__}\0{vocab_size}\0{text}".encode()).hexdigest()[:16]
    path = folder / f"bpe-{vocab_size}-{key}.json"
    if path.is_file():
        try:
            return HFTokenizer("bpe", tokenizers.Tokenizer.from_file(str(path)))
        except Exception as exc:  # noqa: BLE001  (truncated or foreign JSON: one line, and how to go on)
            raise DataError(f"tokenizer {path} is unreadable ({first_line(exc)}); remove it to train again") from None
    tokenizer = tokenizers.Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=alphabet, show_progress=False)
    tokenizer.train_from_iterator(text.splitlines(keepends=True), trainer=trainer)
    try:
        write_text_atomic(path, tokenizer.to_str())
    except OSError as exc:  # a read-only data cache: the run goes on, the next one trains it again
        warnings.warn(f"could not keep the trained tokenizer in {folder} ({first_line(exc)})", stacklevel=2)
    return HFTokenizer("bpe", tokenizer)


def tiktoken_encoding(name: str, cache: Path) -> TiktokenTokenizer:
    """OpenAI's encoding ``name``, downloaded once into ``cache`` (tiktoken's own cache there)."""
    if name not in tiktoken.list_encoding_names():
        raise ConfigError(f"data.tokenizer=tiktoken:{name}: no such encoding; valid: "
                          f"{', '.join(tiktoken.list_encoding_names())}")  # fmt: skip
    cache.mkdir(parents=True, exist_ok=True)
    before = os.environ.get("TIKTOKEN_CACHE_DIR")
    os.environ["TIKTOKEN_CACHE_DIR"] = str(cache)  # where tiktoken keeps what it downloads
    try:
        return TiktokenTokenizer(f"tiktoken:{name}", tiktoken.get_encoding(name))
    except OSError as exc:  # requests' ConnectionError and friends
        raise DataError(f"tokenizer tiktoken:{name} needs the network once to download its encoding into {cache} "
                        f"({first_line(exc)[:80]}); {OFFLINE}") from None  # fmt: skip
    finally:
        os.environ.pop("TIKTOKEN_CACHE_DIR") if before is None else os.environ.update(TIKTOKEN_CACHE_DIR=before)


def hf_tokenizer(name: str, cache: Path) -> HFTokenizer:
    """``tokenizer.json`` of the folder ``name``, or of the Hub repository ``name`` (downloaded once)."""
    folder = Path(name).expanduser()
    if folder.is_dir():
        path = folder / "tokenizer.json"
        if not path.is_file():
            raise DataError(f"data.tokenizer=hf:{name}: the folder holds no tokenizer.json")
    else:
        try:
            path = Path(hf_hub_download(name, "tokenizer.json", cache_dir=str(cache)))
        except Exception as exc:  # noqa: BLE001  (offline, no such repository, no tokenizer.json in it)
            raise DataError(f"tokenizer hf:{name} could not be fetched from the Hugging Face Hub "
                            f"({first_line(exc)[:100]}); {OFFLINE}") from None  # fmt: skip
    try:
        return HFTokenizer(f"hf:{name}", tokenizers.Tokenizer.from_file(str(path)))
    except Exception as exc:  # noqa: BLE001
        raise DataError(f"tokenizer {path} is unreadable ({first_line(exc)})") from None
