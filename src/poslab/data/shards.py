"""Token shards on disk, streamed: a corpus tokenized once, read back in fixed-length windows without holding it.

Written and read by Lightning's streaming engine, litdata: ``optimize`` tokenizes the documents in parallel
workers into chunks (``TokensLoader``'s layout: one flat array of tokens per chunk), ``StreamingDataset`` reads
``context + 1``-token windows back, each DDP rank and data-loader worker its own chunks, shuffled per epoch by
the run's seed; a local folder or a bucket URL alike (litdata reads ``s3://`` and ``gs://``). Beside the chunks,
``manifest.json`` records what they hold (the tokenizer, its vocabulary, the source, the counts, the dtype), so
a run on another tokenizer or source refuses them in one line instead of training on the wrong ids.

A preparation writes into a temporary folder beside its target and renames it into place when every chunk and
the manifest are written: an interrupted one leaves nothing that looks complete, and the next run prepares
again. Tokens are ``uint16`` while the vocabulary fits in 65,536 ids (nanoGPT's and modded-nanogpt's shards),
``int32`` above.

Training resumes at the exact window: :class:`StreamedLoader` saves litdata's state as it was when training
had consumed its batches, not where its prefetching had got to.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import multiprocessing
import os
import random
import shutil
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from poslab.errors import DataError, first_line
from poslab.files import write_json_atomic

MANIFEST = "manifest.json"
#: What a chunk holds at most (litdata's ``chunk_bytes``): 64 MB, litgpt's OpenWebText takes 200 MB.
CHUNK_BYTES = "64MB"
FORMAT = "litdata TokensLoader"


def token_dtype(vocab_size: int) -> torch.dtype:
    """The narrowest dtype that holds every id of a ``vocab_size`` vocabulary."""
    return torch.uint16 if vocab_size <= 2**16 else torch.int32


class Tokenize:
    """litdata's ``fn``: a document's tokens as one flat NumPy array. NumPy, not torch: the workers are forked,
    and a forked child that enters torch's OpenMP pool after its parent used it can hang (measured here: a
    preparation after a training step never finished)."""

    def __init__(self, encode: Callable[[str], list[int]], dtype: torch.dtype) -> None:
        self.encode, self.dtype = encode, np.dtype(str(dtype).removeprefix("torch."))

    def __call__(self, document: str):
        ids = self.encode(document)
        if ids:
            yield np.asarray(ids, dtype=self.dtype)


class Parts(list):
    """A corpus too large to hold, as the readers of its parts (each a callable returning an iterator of documents):
    each preparation worker reads its parts itself, so no document passes through the parent."""


class TokenizeParts:
    """litdata's ``fn`` for :class:`Parts`: every document of part ``index``, tokenized, one array each."""

    def __init__(self, parts: Parts, encode: Callable[[str], list[int]], dtype: torch.dtype) -> None:
        self.parts, self.tokenize = parts, Tokenize(encode, dtype)

    def __call__(self, index: int):
        for document in self.parts[index]():
            yield from self.tokenize(document)


def prepare_shards(
    documents: Sequence[str] | Parts,
    encode: Callable[[str], list[int]],
    folder: Path,
    manifest: dict[str, Any],
    workers: int = 1,
    chunk_bytes: str | int = CHUNK_BYTES,
    echo: Callable[[str], None] = print,
    progress: bool = False,
) -> dict[str, Any]:
    """Tokenize ``documents`` (or read and tokenize :class:`Parts`) with ``encode`` into litdata chunks under
    ``folder`` and write its manifest (``manifest`` with the counts added); returns the manifest.
    ``manifest["vocab_size"]`` picks the dtype; ``progress``: litdata's progress bar."""
    if not documents:
        raise DataError(f"nothing to prepare into {folder}: the source holds no documents")
    folder = Path(folder)
    dtype = token_dtype(int(manifest["vocab_size"]))
    partial = folder.with_name(f"{folder.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    started = time.perf_counter()
    try:
        if isinstance(documents, Parts):
            counted, count = "part", len(documents)
            prepare_in_rounds(documents, encode, dtype, folder, partial, manifest, workers, chunk_bytes, echo, progress)
        else:
            counted, count = "document", len(documents)
            tokenize_into(partial, Tokenize(encode, dtype), list(documents), workers, chunk_bytes, progress)
        index = json.loads((partial / "index.json").read_text())
        tokens = sum(chunk["dim"] for chunk in index["chunks"])
        if not tokens:
            raise DataError(f"nothing to prepare into {folder}: the source's documents hold no tokens")
        seconds = time.perf_counter() - started
        written = {
            **manifest, "format": FORMAT, "dtype": str(dtype).removeprefix("torch."), f"{counted}s": count,
            "tokens": tokens, "chunks": len(index["chunks"]), "seconds": round(seconds, 3),
        }  # fmt: skip
        write_json_atomic(partial / MANIFEST, written)
        shutil.rmtree(folder, ignore_errors=True)
        partial.rename(folder)
        shutil.rmtree(rounds_folder(folder), ignore_errors=True)
    except OSError as exc:  # a full disk, a folder that cannot be written
        shutil.rmtree(partial, ignore_errors=True)
        raise DataError(f"could not write the token shards into {folder}: {first_line(exc)}") from None
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    echo(f"poslab prepare: {tokens:,} tokens of {count:,} {counted}s in {written['chunks']} shard(s) "
         f"in {seconds:.1f} s ({tokens / seconds:,.0f} tokens/s) -> {folder}")  # fmt: skip
    return written


def tokenize_into(output: Path, fn, inputs: list, workers: int, chunk_bytes, progress: bool) -> None:
    """litdata's ``optimize``: ``fn`` over ``inputs`` in up to ``workers`` forked processes, into ``output``; an
    error in a worker (which litdata returns as its traceback's text) is one line, the worker's own."""
    from litdata import TokensLoader, optimize  # deferred: litdata, ~1.9 s

    try:
        with rng_untouched():  # a run that prepares its shards draws its weights as one that finds them
            optimize(
                fn=fn, inputs=inputs, output_dir=str(output.resolve()), chunk_bytes=chunk_bytes,
                item_loader=TokensLoader(), num_workers=max(1, min(workers, len(inputs))), verbose=progress,
                start_method="fork" if sys.platform == "linux" else None,
            )  # fmt: skip
    except RuntimeError as exc:
        raised = [line for line in str(exc).splitlines() if line.startswith("poslab.errors.")]
        if not raised:
            raise
        raise DataError(raised[-1].partition(": ")[2]) from None


def rounds_folder(folder: Path) -> Path:
    """Where the rounds of a preparation in parts are kept until it completes (a rerun continues from them)."""
    return folder.with_name(f"{folder.name}.rounds")


def prepare_in_rounds(parts: Parts, encode, dtype, folder: Path, output: Path, manifest: dict, workers: int,
                      chunk_bytes, echo, progress: bool) -> None:  # fmt: skip
    """:class:`Parts` tokenized ``workers`` parts a round, each round kept (renamed into place when complete)
    in :func:`rounds_folder` until all are: a preparation interrupted (a kill, a full disk, the network)
    resumes at its first unfinished round. The rounds are then merged into ``output`` by litdata's
    ``merge_datasets`` (one round: renamed)."""
    from litdata import merge_datasets  # deferred: litdata, ~1.9 s

    rounds = rounds_folder(folder)
    stated = {key: value for key, value in manifest.items() if key != "seconds"}
    if read_json(rounds / MANIFEST) != stated:  # rounds of other data, or of another way of cutting it: not ours
        shutil.rmtree(rounds, ignore_errors=True)
    rounds.mkdir(parents=True, exist_ok=True)
    write_json_atomic(rounds / MANIFEST, stated)
    size = max(1, workers)
    done = []
    for number, first in enumerate(range(0, len(parts), size)):
        target = rounds / f"round-{number:05d}"
        group = list(range(first, min(first + size, len(parts))))
        if (target / "index.json").is_file():
            echo(f"poslab prepare: parts {group[0]}-{group[-1]} were prepared before; kept")
        else:
            writing = rounds / f"{target.name}.partial-{os.getpid()}"
            shutil.rmtree(writing, ignore_errors=True)
            tokenize_into(writing, TokenizeParts(parts, encode, dtype), group, size, chunk_bytes, progress)
            writing.rename(target)
        done.append(target)
    if len(done) == 1:
        done[0].rename(output)
    else:
        quiet = contextlib.nullcontext() if progress else contextlib.redirect_stderr(io.StringIO())  # its bar
        with quiet:
            merge_datasets([str(d.resolve()) for d in done], str(output.resolve()), max_workers=size)


def read_json(path: Path) -> Any:
    """``path``'s JSON, or None when it is missing or unreadable."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def rng_untouched() -> Iterator[None]:
    """Python's, NumPy's and torch's global RNG as they were before (litdata's preparation draws from them),
    and multiprocessing's start method (litdata sets it for the whole process)."""
    python, numpy_state = random.getstate(), np.random.get_state()
    method = multiprocessing.get_start_method(allow_none=True)
    try:
        with torch.random.fork_rng(devices=[]):
            yield
    finally:
        random.setstate(python)
        np.random.set_state(numpy_state)
        multiprocessing.set_start_method(method, force=True)


def read_manifest(folder: Path) -> dict[str, Any] | None:
    """The shards' manifest, or None when there are none; an unreadable one is one line."""
    path = Path(folder) / MANIFEST
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise DataError(f"{path} is unreadable ({first_line(exc)}); remove {folder} to prepare again") from None


def check_shards(folder: Path, expected: dict[str, Any]) -> dict[str, Any]:
    """The manifest of ``folder``'s shards, checked: it holds what ``expected`` names (tokenizer, vocabulary,
    source), and every chunk the index lists is there at the size the index records. One line otherwise."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    if manifest is None:
        raise DataError(f"no token shards in {folder} (no {MANIFEST}): run `poslab prepare` with the same data.*")
    for key, value in expected.items():
        if manifest.get(key) != value:
            raise DataError(f"the token shards in {folder} hold {key}={manifest.get(key)!r}, this run needs "
                            f"{value!r}; remove the folder (or set data.shards elsewhere) to prepare anew")  # fmt: skip
    if token_dtype(int(manifest["vocab_size"])) != getattr(torch, str(manifest.get("dtype"))):
        raise DataError(f"the token shards in {folder} are {manifest.get('dtype')}, not what a vocabulary of "
                        f"{manifest['vocab_size']:,} takes; remove the folder to prepare again")  # fmt: skip
    try:
        chunks = json.loads((folder / "index.json").read_text())["chunks"]
    except (OSError, ValueError, KeyError) as exc:
        raise DataError(f"{folder / 'index.json'} is unreadable ({first_line(exc)}); remove {folder}") from None
    if sum(c["dim"] for c in chunks) != manifest.get("tokens"):
        raise DataError(f"the index of {folder} counts {sum(c['dim'] for c in chunks):,} tokens, its manifest "
                        f"{manifest.get('tokens'):,}: they are not the same preparation; remove {folder}")  # fmt: skip
    for chunk in chunks:
        path = folder / chunk["filename"]
        size = path.stat().st_size if path.is_file() else None
        if size != chunk["chunk_bytes"]:
            found = "missing" if size is None else f"{size:,} bytes"
            raise DataError(f"token shard {path} is corrupt or truncated ({found}, its index says "
                            f"{chunk['chunk_bytes']:,}); remove {folder} to prepare again")  # fmt: skip
    return manifest


def streamed_loader(folder: Path, window: int, batch_size: int, seed: int, workers: int = 0) -> Any:
    """Shuffled ``window``-token windows of ``folder``'s shards, endless, in batches (see :class:`StreamedLoader`)."""
    from litdata import StreamingDataset, TokensLoader  # deferred: litdata, ~1.9 s

    dataset = StreamingDataset(
        str(Path(folder).resolve()), item_loader=TokensLoader(block_size=window), shuffle=True, seed=seed,
        drop_last=True,
    )  # fmt: skip
    if len(dataset) < 1:
        raise DataError(f"the token shards in {folder} hold less than one window of {window} tokens")
    return _loader_class()(dataset, batch_size=batch_size, num_workers=workers, drop_last=True)


@functools.cache
def _loader_class() -> type:
    from litdata import StreamingDataLoader  # deferred: litdata, ~1.9 s

    class StreamedLoader(StreamingDataLoader):
        """litdata's loader, endless (one epoch after the other, each reshuffled), whose saved position is where
        training is: Lightning's loop fetches ahead of the step it trains, so litdata's own counters run ahead of
        it. After each batch it keeps litdata's counters (epoch, samples yielded, last worker); the position for
        ``consumed`` batches rebuilds litdata's state from the counters of that batch. Lightning saves and
        restores it under the loader's ``state_dict`` too: the same state either way."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._counters: deque[tuple[int, tuple[int, int, int]]] = deque(maxlen=256)
            self._yielded = self._consumed = 0

        def __iter__(self):
            while True:
                for batch in super().__iter__():
                    self._yielded += 1
                    counters = (self.current_epoch, self._num_samples_yielded_streaming, self._latest_worker_idx)
                    self._counters.append((self._yielded, counters))
                    yield batch

        def __len__(self) -> int:
            """None: endless, as the in-memory windows are (``trainer.max_steps`` ends a run); Lightning reads a
            loader without a length as a stream, and litdata's length would change on a restore."""
            raise TypeError("the streamed windows are endless")

        def consumed(self, batches: int, epoch_over: bool = False) -> None:
            self._consumed = batches

        def position(self) -> dict[str, Any] | None:
            found = [c for n, c in self._counters if n == self._consumed]
            if not found:
                return None
            epoch, samples, worker = found[0]
            return {
                "batches": self._consumed,
                "litdata": {
                    "dataset": self.dataset.state_dict(samples, self.num_workers, self.batch_size),
                    "current_epoch": epoch, "num_samples_yielded": samples, "latest_worker_idx": worker,
                },
            }  # fmt: skip

        def resume_from(self, position: dict[str, Any] | None) -> None:
            if position:
                super().load_state_dict(position["litdata"])
                self._yielded = self._consumed = position["batches"]

        def state_dict(self) -> dict[str, Any]:
            return self.position() or {}

        def load_state_dict(self, state_dict: dict[str, Any]) -> None:
            self.resume_from(state_dict or None)

    return StreamedLoader
