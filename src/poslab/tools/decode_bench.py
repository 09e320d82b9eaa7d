"""``make bench-decode``: what the decoding cache buys. Greedy decoding of ``--new`` tokens after a ``--prompt``-token
prompt by the sequence modality's model (``bench``'s, at ``--depth`` x ``--width``: the ``bpe_lengen`` size by
default), once with the cache (:mod:`poslab.nn.decoding`: one row a step) and once without (the whole sequence again
at every step, as decoding without a cache does), for each encoder of ``--encoders``; both must choose the same
tokens. Prints one table (Markdown) and writes ``reports/bench/decode.json``."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from poslab.positions import Positions
from poslab.tools.bench import BenchConfig, build
from poslab.track.tables import markdown_table


def greedy(model, prompt, new: int, cached: bool):
    """``prompt [1, P]`` and ``new`` greedy tokens after it, with the cache or by full forward passes."""
    tokens, cache = prompt, (model.new_cache() if cached else None)
    with torch.no_grad():
        logits = model(prompt, Positions.consecutive(prompt.shape[1]), cache=cache)[:, -1]
        for _ in range(new):
            token = logits.argmax(-1, keepdim=True)
            tokens = torch.cat((tokens, token), dim=1)
            if cached:
                logits = model(token, Positions.consecutive(1, start=tokens.shape[1] - 1), cache=cache)[:, -1]
            else:
                logits = model(tokens, Positions.consecutive(tokens.shape[1]))[:, -1]
    return tokens


def measure(name: str, args) -> dict:
    cfg = BenchConfig(dim=args.width, depth=args.depth, heads=args.heads, length=args.prompt + args.new, batch=1)
    model = build(name, cfg).model.eval()
    prompt = torch.randint(0, 96, (1, args.prompt), generator=torch.Generator().manual_seed(0))
    row = {"encoder": name}
    greedy(model, prompt, 4, cached=True)  # warm-up: the first calls allocate and choose kernels
    for cached in (True, False):
        started = time.perf_counter()
        out = greedy(model, prompt, args.new, cached)
        row["cached_tok_s" if cached else "full_tok_s"] = args.new / (time.perf_counter() - started)
        row["tokens" if cached else "full_tokens"] = out.tolist()
    row["same_tokens"] = row.pop("tokens") == row.pop("full_tokens")
    row["speedup"] = row["cached_tok_s"] / row["full_tok_s"]
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m poslab.tools.decode_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--encoders", nargs="+", default=["none", "rope", "alibi", "fire", "fox"])
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--new", type=int, default=256)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--depth", type=int, default=6)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--out", type=Path, default=Path("reports/bench/decode.json"))
    args = parser.parse_args(argv)
    rows = [measure(name, args) for name in args.encoders]
    table = [[r["encoder"], f"{r['cached_tok_s']:.1f}", f"{r['full_tok_s']:.1f}", f"{r['speedup']:.1f}x",
              "yes" if r["same_tokens"] else "NO"] for r in rows]  # fmt: skip
    print("\n".join(markdown_table(["encoder", "cached tokens/s", "full tokens/s", "speed-up", "same tokens"], table)))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"config": vars(args) | {"out": str(args.out)}, "rows": rows}, indent=2))
    return 0 if all(r["same_tokens"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
