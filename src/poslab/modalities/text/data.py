"""Text data module: corpora as tokens (``data.tokenizer``: characters by default, :mod:`.tokenizers`) with step
positions.

Training draws random windows of ``context + 1`` characters (nanoGPT's
``get_batch``) from an endless, seeded stream, so the run length is
``trainer.max_steps``. Validation and test use non-overlapping windows of
the held-out text. Positions are ``steps``: ``0..L−1``, or — with
``data.random_positions=N`` — a sorted random sample without replacement from
``[0, N)`` per sequence (Ruoss et al. 2023, "Randomized Positional Encodings
Boost Length Generalization of Transformers"), which works with every 1D
encoder. Evaluation samples them too, as the paper's reference code does
(``data.random_positions_eval=sampled``; ``arange``: ``0..L−1``), from its own
generator restarted at every pass over an evaluation set, so every validation,
a resumed run and a re-test score the same positions and training's random
stream is left alone.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from poslab.data.base import PositionDataModule
from poslab.data.resumable import ResumableLoader
from poslab.data.shards import Parts, check_shards, prepare_shards, read_manifest, streamed_loader
from poslab.errors import ConfigError, DataError
from poslab.modalities.text.needle import needle_items
from poslab.modalities.text.passkey import passkey_items
from poslab.modalities.text.sources import SOURCES
from poslab.modalities.text.sources.streamed import StreamedSplits
from poslab.modalities.text.tokenizers import CharTokenizer, Tokenizer, build_tokenizer
from poslab.positions import Positions


class RestartingLoader(DataLoader):
    """An evaluation loader that calls ``on_start`` whenever a pass over it begins."""

    def __init__(self, *args: Any, on_start=None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.on_start = on_start

    def __iter__(self):
        if self.on_start is not None:
            self.on_start()
        return super().__iter__()


def random_positions(batch: int, length: int, limit: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """``[batch, length]`` sorted samples without replacement from ``[0, limit)``."""
    if limit < length:
        raise ConfigError(f"data.random_positions={limit} must be at least the sequence length {length}")
    keys = torch.rand(batch, limit, generator=generator)
    return keys.topk(length, dim=-1).indices.sort(dim=-1).values


def line_pieces(text: str, size: int) -> list[str]:
    """``text`` in pieces of about ``size`` characters, each ending at a line end (the last at the text's)."""
    pieces, start = [], 0
    while start < len(text):
        end = text.find("\n", start + size)
        end = len(text) if end < 0 else end + 1
        pieces.append(text[start:end])
        start = end
    return pieces


def sliding_windows(tokens: torch.Tensor, length: int, stride: int) -> list[tuple[torch.Tensor, int]]:
    """``(window, first)`` pairs covering every target of ``tokens`` (inputs ``tokens[:-1]``) once: windows of
    ``length + 1`` tokens starting every ``stride`` tokens, the last one ending at the text's end; each scores
    its targets from ``first`` on (those the window before did not score), so every scored token after the
    first window sees at least ``length - stride`` tokens of context. A text shorter than a window is one."""
    targets = len(tokens) - 1
    if targets <= length:
        return [(tokens, 0)]
    starts = list(range(0, targets - length, stride)) + [targets - length]
    windows, scored = [], 0
    for start in starts:
        windows.append((tokens[start : start + length + 1], scored - start))
        scored = start + length
    return windows


class RandomWindows(IterableDataset):
    """Endless batches of random ``length + 1`` windows (inputs + shifted targets)."""

    def __init__(self, tokens: torch.Tensor, length: int, batch_size: int, seed: int) -> None:
        if len(tokens) <= length + 1:
            raise DataError(f"training text has {len(tokens)} characters, fewer than a context of {length}")
        self.tokens, self.length, self.batch_size, self.seed = tokens, length, batch_size, seed

    def __iter__(self) -> Iterator[torch.Tensor]:
        generator = torch.Generator().manual_seed(self.seed)
        offsets = torch.arange(self.length + 1)
        while True:
            starts = torch.randint(0, len(self.tokens) - self.length - 1, (self.batch_size, 1), generator=generator)
            yield self.tokens[starts + offsets]


class ContiguousWindows(Dataset):
    """Non-overlapping ``length + 1`` windows (the ALiBi paper's evaluation protocol)."""

    def __init__(self, tokens: torch.Tensor, length: int) -> None:
        self.tokens, self.length = tokens, length
        self.count = (len(tokens) - 1) // length

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.tokens[i * self.length : (i + 1) * self.length + 1]


class SplitTexts(Sequence):
    """A source's (train, val, test) texts, each read when a tokenizer asks for it: ``char`` reads all three,
    ``bpe`` the training split, the others none, so a streamed corpus's training sample (up to 128 M
    characters read from the network) is read only for a tokenizer that trains on it."""

    NAMES = ("train", "val", "test")

    def __init__(self, splits) -> None:
        self.source = splits

    def __len__(self) -> int:
        return len(self.NAMES)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(len(self))[index]]
        return getattr(self.source, self.NAMES[index])


class TextDataModule(PositionDataModule):
    """``multiples``: the lengths the length study evaluates, as multiples of ``data.context``
    (``eval.multiples``); the held-out text is cut so that every one of them scores the same characters."""

    def __init__(self, cfg: Any, seed: int = 0, train_data: Any = None, multiples: Sequence[int] = (1,)) -> None:
        super().__init__(cfg, seed, train_data)
        self.context = int(cfg.context)
        #: every evaluated window length divides this, so whole windows of each length cover the same text
        self.eval_unit = self.context * math.lcm(*(int(m) for m in multiples))
        self.splits: dict[str, torch.Tensor] = {}
        self.vocab: Tokenizer | None = None
        self._steps: dict[tuple, torch.Tensor] = {}
        self._eval_rng = torch.Generator()

    @classmethod
    def from_config(cls, cfg: Any, train_cfg: dict | None = None) -> TextDataModule:
        """The length study's lengths (``eval.multiples``) decide which held-out characters every length scores."""
        train_data = train_cfg["data"] if train_cfg else None
        return cls(cfg.data, seed=cfg.seed, train_data=train_data, multiples=list(cfg.eval.multiples))

    # -- facts for the model -------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def model_facts(self) -> dict[str, Any]:
        """What the task is sized by: the vocabulary (a character tokenizer's characters are saved with the
        checkpoint; another tokenizer is made again from the data's config)."""
        if isinstance(self.vocab, CharTokenizer):
            return {"vocab_size": len(self.vocab), "vocab": self.vocab.chars}
        return {"vocab_size": len(self.vocab)}

    def context_options(self) -> dict[str, Any]:
        """What the data tells the encoder: the longest position seen in training."""
        return {"max_len": self.cfg.random_positions or self.context}

    def similarity_positions(self) -> tuple[Positions, int, None]:
        return Positions.consecutive(self.context), self.context, None

    # -- Lightning hooks -----------------------------------------------------------------
    def prepare_data(self) -> None:
        self.read_source(self.cfg.download)

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        root = Path(self.cfg.root)
        texts = self.read_source(False)
        streamed = isinstance(texts, StreamedSplits)
        if streamed and (not self.cfg.stream or self.cfg.tokenizer == "char"):
            got = f"got data.stream={self.cfg.stream}, data.tokenizer={self.cfg.tokenizer}"
            raise ConfigError(f"data={self.cfg.name} data.path={self.cfg.path} is streamed, never held: it trains "
                              "with data.stream=true and a subword tokenizer (data.tokenizer=bpe, tiktoken:<encoding> "
                              f"or hf:<tokenizer>; {got})")  # fmt: skip
        self.vocab = build_tokenizer(self.cfg.tokenizer, root, SplitTexts(texts), self.cfg.vocab_size)
        if self.cfg.stream:  # training reads the shards; only the held-out splits are kept as tokens
            self.shards = self.prepare_shards(texts if streamed else texts.train)
        train = "" if self.cfg.stream else texts.train
        self.splits = {name: self.vocab.encode(text) for name, text in (("train", train), ("val", texts.val),
                                                                        ("test", texts.test))}  # fmt: skip
        for split in ("val", "test"):
            if len(self.held_out(split)) < 2:
                raise ConfigError(
                    f"no {split} characters to score: data.eval_tokens={self.cfg.eval_tokens} and the "
                    f"{len(self.splits[split])}-character {split} split hold less than one window of "
                    f"{self.eval_unit} characters (data.context x the lcm of eval.multiples)"
                )

    def tokenizer(self) -> Tokenizer:
        """The data's tokenizer alone (generation): made, or read back, from the source's splits."""
        texts = SplitTexts(self.read_source(self.cfg.download))
        return build_tokenizer(self.cfg.tokenizer, Path(self.cfg.root), texts, self.cfg.vocab_size)

    def read_source(self, download: bool):
        """The source's splits; a corpus of records also reads ``data.field`` (the loaders that take it)."""
        loader = SOURCES[self.cfg.name]
        field = {"field": self.cfg.field} if "field" in inspect.signature(loader).parameters else {}
        return loader(Path(self.cfg.root), download, self.cfg.path, **field)

    # -- token shards ----------------------------------------------------------------------
    #: The training split is cut into documents of about this many characters, at line ends, for the
    #: preparation's workers (a document is tokenized on its own).
    DOCUMENT_CHARS = 1 << 20
    #: Show the preparation's progress bar (``poslab prepare`` sets it; a run prints one line).
    progress = False

    def shard_manifest(self, train: str | StreamedSplits) -> dict[str, Any]:
        """What the shards of this data hold: checked against their manifest before a run reads them (a
        streamed corpus, never read whole, is named by what it is read from)."""
        source = {"name": self.cfg.name, "path": self.cfg.path}
        if isinstance(train, StreamedSplits):
            source["stream"] = train.identity
        else:
            source["train_sha256"] = hashlib.sha256(train.encode()).hexdigest()[:16]
        return {"tokenizer": self.vocab.spec, "tokenizer_fingerprint": self.vocab.fingerprint(),
                "vocab_size": len(self.vocab), "source": source}  # fmt: skip

    def shards_folder(self, manifest: dict[str, Any]) -> str:
        """``data.shards``, else ``<data.root>/shards/<source>-<digest of what they hold>``."""
        if self.cfg.shards:
            return str(self.cfg.shards)
        key = hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()[:12]
        return str(Path(self.cfg.root) / "shards" / f"{self.cfg.name}-{key}")

    def prepare_shards(self, train: str | StreamedSplits, echo: Callable[[str], None] = print) -> str:
        """The training split's token shards, prepared unless they are there (checked against what they hold);
        a streamed corpus's parts are read by the preparation's workers, never held."""
        expected = self.shard_manifest(train)
        folder = self.shards_folder(expected)
        if read_manifest(Path(folder)) is None and "://" not in folder:
            streamed = isinstance(train, StreamedSplits)
            documents = Parts(train.parts) if streamed else line_pieces(train, self.DOCUMENT_CHARS)
            workers = max(1, self.cfg.workers)
            prepare_shards(
                documents, self.vocab.ids, Path(folder), expected, workers, echo=echo, progress=self.progress
            )
        elif "://" not in folder:
            echo(f"poslab prepare: the token shards in {folder} are prepared")
        if "://" not in folder:
            check_shards(Path(folder), expected)
        return folder

    def held_out(self, split: str) -> torch.Tensor:
        """The characters scored on a held-out split (plus the first one, never a target).

        The first ``data.eval_tokens`` of them, cut down to a multiple of
        :attr:`eval_unit`, so validation, test and every length of the length
        study score exactly the same characters.
        """
        tokens = self.splits[split]
        scored = min(self.cfg.eval_tokens, len(tokens) - 1) // self.eval_unit * self.eval_unit
        return tokens[: scored + 1]

    def stream_seed(self) -> int:
        """The run's seed, offset by the DDP rank so every process draws different windows."""
        return self.seed + (self.trainer.global_rank if self.trainer is not None else 0)

    def train_dataloader(self) -> DataLoader:
        if self.cfg.stream:  # each rank and worker its own shards (litdata), shuffled by the run's seed
            loader = streamed_loader(self.shards, self.context + 1, self.cfg.batch_size, self.seed, self.cfg.workers)
            return self.resumable(loader)
        windows = RandomWindows(self.splits["train"], self.context, self.cfg.batch_size, self.stream_seed())
        return self.resumable(ResumableLoader(windows, batch_size=None))

    def long_windows(self, multiple: int, rows: int, step: int) -> torch.Tensor:
        """``rows`` random training windows of ``multiple`` × the context (+ 1 for the targets), drawn from the
        run's seed and ``step`` (a resumed run draws the same): the long rows of an encoder trained past the
        context (:meth:`poslab.encoders.base.PositionEncoder.training_multiple`)."""
        if self.cfg.stream:
            raise ConfigError("training on rows longer than the context draws them from the training text in memory; "
                              "set data.stream=false")  # fmt: skip
        tokens, length = self.splits["train"], self.context * multiple
        if len(tokens) <= length + 1:
            raise DataError(f"training text has {len(tokens)} tokens, fewer than a row of {length}")
        generator = torch.Generator().manual_seed(self.stream_seed() * 1_000_003 + step)
        starts = torch.randint(0, len(tokens) - length - 1, (rows, 1), generator=generator)
        return tokens[starts + torch.arange(length + 1)]

    def val_dataloader(self) -> DataLoader:
        return self.eval_loader(ContiguousWindows(self.held_out("val"), self.context), self.cfg.eval_batch_size)

    def test_dataloader(self) -> DataLoader:
        return self.eval_loader(ContiguousWindows(self.held_out("test"), self.context), self.cfg.eval_batch_size)

    def lengen_loader(self, multiple: int) -> DataLoader:
        """Test windows of ``multiple`` × the training context (the same characters at every length of
        ``eval.multiples``, see :meth:`held_out`)."""
        length = self.context * multiple
        batch = max(1, self.cfg.eval_batch_size // multiple)
        return self.eval_loader(ContiguousWindows(self.held_out("test"), length), batch)

    def longdoc_loader(self, length: int, stride: int, tokens: int) -> DataLoader:
        """Sliding windows of ``length`` tokens over the first ``tokens`` targets of the test split (see
        :func:`sliding_windows`), batched as the length study's ``length / context`` multiple is."""
        windows = sliding_windows(self.splits["test"][: tokens + 1], length, stride)
        batch = max(1, self.cfg.eval_batch_size * self.context // max(length, self.context))
        return self.eval_loader(windows, batch)

    def passkey_loader(self, length: int, depths: int, trials: int) -> DataLoader:
        """Passkey prompts of ``length`` tokens (:mod:`poslab.modalities.text.passkey`), every depth x trial."""
        items = passkey_items(self.vocab.ids, length, depths, trials, self.seed)
        batch = max(1, self.cfg.eval_batch_size * self.context // max(length, self.context))
        return self.eval_loader(items, batch)

    def search_loader(self, multiple: int, tokens: int) -> DataLoader:
        """Validation windows of ``multiple`` × the context, about ``tokens`` characters (at least one window):
        what a searched extension (LongRoPE's factors) is fitted on, apart from the test characters that
        score it."""
        length = self.context * multiple
        validation = self.splits["val"]
        count = max(1, min(tokens, len(validation) - 1) // length)
        batch = max(1, self.cfg.eval_batch_size // multiple)
        return self.eval_loader(ContiguousWindows(validation[: count * length + 1], length), batch)

    def needle_loader(self, multiple: int, tokens: int) -> DataLoader:
        """Needle prompts of ``multiple`` × the context on about ``tokens`` validation tokens (at least one
        prompt, :mod:`poslab.modalities.text.needle`): what LongRoPE2's search is scored by."""
        length = self.context * multiple
        items = needle_items(self.vocab.ids, self.splits["val"], length, max(1, tokens // length), self.seed)
        return self.eval_loader(items, max(1, self.cfg.eval_batch_size // multiple))

    def eval_loader(self, dataset: Dataset | list, batch_size: int | None) -> DataLoader:
        """An evaluation loader whose passes all draw the same sampled positions (see the module docstring)."""
        return RestartingLoader(dataset, batch_size=batch_size, on_start=self.restart_eval_positions)

    def restart_eval_positions(self) -> None:
        self._eval_rng.manual_seed(self.seed + 1)

    def on_after_batch_transfer(self, batch: torch.Tensor, dataloader_idx: int) -> dict[str, Any]:
        training = self.trainer is not None and self.trainer.training
        return self.as_batch(batch, training)

    def as_batch(self, windows: torch.Tensor, training: bool = False) -> dict[str, Any]:
        windows = windows.long()  # streamed shards hold uint16 / int32 ids
        inputs, targets = windows[:, :-1], windows[:, 1:]
        return {"tokens": inputs, "targets": targets, "pos": self.positions(inputs.shape, inputs.device, training)}

    def positions(self, shape: torch.Size, device: torch.device, training: bool) -> Positions:
        batch, length = shape
        limit = self.cfg.random_positions
        if limit and (training or self.cfg.random_positions_eval == "sampled"):
            steps = random_positions(batch, length, limit, None if training else self._eval_rng).to(device)
            return Positions(steps=steps, steps_end=limit)
        key = (length, device)
        if key not in self._steps:  # one tensor per length, so encoders' per-forward caches hit
            with torch.inference_mode(False):  # reused by training steps after validation created it
                self._steps[key] = torch.arange(length, device=device)
        return Positions(steps=self._steps[key], steps_start=0, steps_end=length)
