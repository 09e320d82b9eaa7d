"""``make bench-data``: does streaming from token shards keep up with training, and stay flat in memory?

Three figures, on a corpus of repeated copies of a text file (``--text``; a generated one without it):

1. **prepare**: tokens/s of :func:`poslab.data.shards.prepare_shards` with a byte-level BPE of
   ``--vocab`` tokens (Hugging Face ``tokenizers``, trained here on the first megabyte), ``--workers`` processes.
2. **stream**: tokens/s the streamed loader delivers (``context + 1`` windows, batches of ``--batch``), against
   the tokens/s one CPU training step of the sequence modality's model consumes at ``--depth`` × ``--width``
   and context ``--context`` (the ``bpe_lengen`` size by default): the ratio is the headroom.
3. **memory**: peak resident memory of a fresh process that streams every window of a corpus of ``--small``
   shards, and of one ``--large`` times bigger (each shard ``--shard-mb``): the ratio shows whether memory
   grows with the corpus.

Prints one table (Markdown) and writes ``reports/bench/stream.json``.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from poslab.data.shards import prepare_shards, streamed_loader
from poslab.modalities.registry import get_modality
from poslab.tools.bench import sequence_modality
from poslab.track.tables import markdown_table

WORDS = "the king shall speak to thee my lord and what is love o night of day in all our hearts".split()


def corpus(text: Path | None, megabytes: float, seed: int = 0) -> str:
    """About ``megabytes`` of text: copies of ``text``, or seeded words and line breaks."""
    size = int(megabytes * 2**20)
    if text is not None:
        base = text.read_text(encoding="utf-8")
        return (base * (size // len(base) + 1))[:size]
    rng = random.Random(seed)
    lines = [" ".join(rng.choices(WORDS, k=rng.randint(4, 12))) + ".\n" for _ in range(5000)]
    block = "".join(lines)
    return (block * (size // len(block) + 1))[:size]


def byte_bpe(sample: str, vocab: int):
    """A byte-level BPE of ``vocab`` tokens trained on ``sample`` (GPT-2's byte alphabet)."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)  # fmt: skip
    tokenizer.train_from_iterator(sample.splitlines(keepends=True), trainer=trainer)
    return tokenizer


class Encode:
    """A picklable ``encode`` for the preparation's workers."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    def __call__(self, text: str) -> list[int]:
        return self.tokenizer.encode(text).ids


def documents(text: str, size: int = 1 << 20) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def measure_prepare(text: str, folder: Path, vocab: int, workers: int, shard_mb: float) -> dict:
    tokenizer = byte_bpe(text[: 1 << 20], vocab)
    started = time.perf_counter()
    manifest = prepare_shards(documents(text), Encode(tokenizer), folder, {"vocab_size": vocab}, workers,
                              chunk_bytes=int(shard_mb * 2**20), echo=lambda _: None)  # fmt: skip
    seconds = time.perf_counter() - started
    return {"tokens": manifest["tokens"], "chunks": manifest["chunks"], "seconds": seconds,
            "tokens_per_s": manifest["tokens"] / seconds}  # fmt: skip


def measure_stream(folder: Path, context: int, batch: int, workers: int, batches: int) -> float:
    """Tokens/s the loader delivers over ``batches`` batches (after one to start its workers)."""
    iterator = iter(streamed_loader(folder, context + 1, batch, seed=0, workers=workers))
    next(iterator)
    started = time.perf_counter()
    for _ in range(batches):
        next(iterator)
    return batches * batch * (context + 1) / (time.perf_counter() - started)


def measure_model(context: int, batch: int, depth: int, width: int, heads: int, vocab: int, steps: int) -> float:
    """Tokens/s one CPU training step of the sequence modality's model consumes (median of ``steps``)."""
    build = get_modality(sequence_modality()).piece("training_step")
    step = build("rope", dim=width, depth=depth, num_heads=heads, length=context, batch=batch, vocab_size=vocab)
    step.run()
    times = []
    for _ in range(steps):
        started = time.perf_counter()
        step.run()
        times.append(time.perf_counter() - started)
    return batch * context / statistics.median(times)


def stream_all(folder: str, context: int) -> None:
    """A fresh process's whole pass over the shards; prints its peak resident memory in MiB."""
    loader = streamed_loader(Path(folder), context + 1, 64, seed=0, workers=0)
    windows, total = 0, len(loader.dataset)
    for batch in loader:
        windows += len(batch)
        if windows >= total - 64:
            break
    print(json.dumps({"windows": windows, "peak_mib": peak_resident_mib()}))


def peak_resident_mib() -> float:
    """This process's peak resident memory: Linux's ``VmHWM`` (of this address space; ``ru_maxrss`` would keep
    the parent's peak across ``exec``), else ``ru_maxrss``."""
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def peak_while_streaming(folder: Path, context: int) -> dict:
    done = subprocess.run([sys.executable, "-m", "poslab.tools.stream_bench", "--stream-all", str(folder),
                           "--context", str(context)], capture_output=True, text=True, check=True)  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="poslab-bench-data", description=__doc__.splitlines()[0])
    parser.add_argument("--text", type=Path, help="a UTF-8 file whose copies make the corpus (default: generated)")
    parser.add_argument("--megabytes", type=float, default=20.0, help="the corpus for prepare and stream")
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--depth", type=int, default=6)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--shard-mb", type=float, default=1.0)
    parser.add_argument("--small", type=int, default=2, help="shards of the small corpus (memory)")
    parser.add_argument("--large", type=int, default=20, help="how many times bigger the large corpus is")
    parser.add_argument("--out", type=Path, default=Path("reports/bench/stream.json"))
    parser.add_argument("--stream-all", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.stream_all:
        stream_all(args.stream_all, args.context)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        text = corpus(args.text, args.megabytes)
        prepared = measure_prepare(text, Path(tmp) / "corpus", args.vocab, args.workers, args.shard_mb)
        streamed = {w: measure_stream(Path(tmp) / "corpus", args.context, args.batch, w, 200) for w in (0, 2)}
        consumed = measure_model(args.context, args.batch, args.depth, args.width, args.heads, args.vocab, 5)
        memory = {}
        for name, shards in (("small", args.small), ("large", args.small * args.large)):
            megabytes = shards * args.shard_mb  # uint16 ids: a byte of text is about a token's 2 bytes / 4
            folder = Path(tmp) / name
            text = documents(corpus(None, 2 * megabytes, seed=1))
            prepare_shards(text, lambda t: list(t.encode()), folder, {"vocab_size": 256}, 1,
                           chunk_bytes=int(args.shard_mb * 2**20), echo=lambda _: None)  # fmt: skip
            count = len(list(folder.glob("chunk-*.bin")))
            memory[name] = {"shards": count, **peak_while_streaming(folder, args.context)}
    rows = [
        ["prepare", f"{prepared['tokens']:,} tokens, {prepared['chunks']} shards, {args.workers} workers",
         f"{prepared['tokens_per_s']:,.0f} tokens/s"],
        *[["stream", f"{w} loader workers", f"{v:,.0f} tokens/s ({v / consumed:,.0f}x the model)"]
          for w, v in streamed.items()],
        ["model", f"{args.depth} x {args.width}, context {args.context}, batch {args.batch}, CPU",
         f"{consumed:,.0f} tokens/s"],
        *[["memory", f"{m['shards']} shards ({m['windows']:,} windows)", f"peak {m['peak_mib']:,.0f} MiB"]
          for m in memory.values()],
        ["memory", f"{args.large}x the corpus",
         f"{memory['large']['peak_mib'] / memory['small']['peak_mib']:.2f}x the peak"],
    ]  # fmt: skip
    print("\n".join(markdown_table(["measure", "setting", "result"], rows)))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    record = {"prepare": prepared, "stream": streamed, "model_tokens_per_s": consumed, "memory": memory,
              "args": {k: str(v) for k, v in vars(args).items()}}  # fmt: skip
    args.out.write_text(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
