"""``make bench``: step time and peak memory of each 1D encoder against ``none``.

One training step (forward + backward + AdamW) of the sequence modality's
model (text's causal LM, built by its ``training_step``) at a long context,
for every encoder that fits it. Rounds interleave the encoders;
times are medians over rounds, and each time ratio is the median of the
per-round ratios to ``none`` (same round, seconds apart), so a machine whose
speed drifts over minutes does not skew it. Peak memory is measured in a fresh process per
encoder: on a GPU ``torch.cuda.max_memory_allocated``; on the CPU the heap in
use (glibc ``mallinfo2``: malloc'd plus mmap'd bytes, where PyTorch's CPU
tensors live) sampled after every module's forward and backward, minus what
was in use before the step.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import statistics
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

from rich.console import Console
from rich.table import Table

from poslab.errors import ConfigError
from poslab.modalities.registry import available_modalities, get_modality

#: The project's targets: ratio to `none` (time, memory); None = not targeted.
TARGETS = {
    "sinusoidal": (1.05, None),
    "learned": (1.05, None),
    "rope": (1.15, None),
    "alibi": (1.3, 1.5),
    "t5": (1.3, 1.5),
    "relative": (1.3, 1.5),
    "kerple": (1.3, 1.5),  # an offsets-only bias, like T5
    "fire": (1.3, 1.5),  # a bias, though one that depends on the query's position: laid out L x L
    "xpos": (1.15, None),  # RoPE plus a per-position scale
    "rnope": (1.15, None),  # RoPE in three layers of four
    # cope: no target. It writes the L x L logits out (and an L x L gather) in every layer by design.
}
#: Past the target length, a bias must grow no faster than attention itself: at these lengths every
#: targeted encoder with an additive bias is held to this (time, memory) ratio to ``none`` (the default run
#: times FIRE, laid out ``L x L``, at the first of them only: :func:`timed_at`).
LONG_LENGTHS = (2048, 4096)
LONG_BIAS_TARGET = (1.3, 1.3)


@dataclass
class BenchConfig:
    length: int = 1024
    batch: int = 4
    dim: int = 128
    depth: int = 4
    heads: int = 4
    rounds: int = 5
    steps: int = 2
    device: str = "cpu"


def sequence_modality() -> str:
    """The modality the bench times 1D encoders on: the canonical picture of step positions (``shows``) that
    builds a training step (the text model)."""
    for name in available_modalities():
        record = get_modality(name)
        if "steps" in record.shows and record.training_step is not None:
            return name
    raise ConfigError("no modality shows steps and builds a training step (Modality.training_step)")


def build(name: str, cfg: BenchConfig):
    """One training step of the sequence modality's model with encoder ``name`` (``.model``: what it trains)."""
    build_step = get_modality(sequence_modality()).piece("training_step")
    step = build_step(name, dim=cfg.dim, depth=cfg.depth, num_heads=cfg.heads, length=cfg.length, batch=cfg.batch,
                      device=cfg.device)  # fmt: skip
    if not cfg.device.startswith("cuda"):
        return step
    import torch  # deferred: the CLI imports this module for `poslab --help`

    def synchronized() -> None:  # a step is timed to its end on the GPU
        step()
        torch.cuda.synchronize()

    synchronized.model = step.model
    return synchronized


def time_steps(names: list[str], cfg: BenchConfig) -> dict[str, float]:
    """Median ms per step, rounds interleaving the encoders."""
    return {n: statistics.median(v) for n, v in time_samples(names, cfg).items()}


def time_samples(names: list[str], cfg: BenchConfig) -> dict[str, list[float]]:
    """ms per step of every encoder in each round; a round runs every encoder once, back to back."""
    steps = {n: build(n, cfg) for n in names}
    for step in steps.values():  # warm-up: allocator, caches, kernels
        step()
    samples: dict[str, list[float]] = {n: [] for n in names}
    for _ in range(cfg.rounds):
        for name, step in steps.items():
            start = time.perf_counter()
            for _ in range(cfg.steps):
                step()
            samples[name].append(1000 * (time.perf_counter() - start) / cfg.steps)
    return samples


def round_ratios(samples: dict[str, list[float]], reference: str = "none") -> dict[str, float]:
    """Median over rounds of each encoder's time / the reference's time *in the same round*.

    A shared machine's speed drifts by tens of percent over minutes (measured
    here: ``none`` 345 → 457 ms a step within an hour); a ratio taken within one
    round, seconds apart, cancels that drift, where a ratio of medians over all
    rounds does not.
    """
    base = samples[reference]
    return {n: statistics.median(t / b for t, b in zip(v, base, strict=True)) for n, v in samples.items()}


def heap_in_use() -> int:
    """Bytes the C heap has handed out right now (glibc ``mallinfo2``)."""

    class MallInfo2(ctypes.Structure):
        _fields_ = [(f, ctypes.c_size_t) for f in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                     "fsmblks", "uordblks", "fordblks", "keepcost")]  # fmt: skip

    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = MallInfo2
    info = libc.mallinfo2()
    return info.uordblks + info.hblkhd


def peak_memory_child(name: str, cfg: BenchConfig) -> float:
    """In a fresh process: MB of peak memory one training step adds."""
    import torch  # deferred: torch, ~2.3 s

    step = build(name, cfg)
    step()  # optimizer state and caches exist before the measured step
    if cfg.device.startswith("cuda"):
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        step()
        return (torch.cuda.max_memory_allocated() - base) / 2**20
    samples: list[int] = []
    model = step.model

    def sample(*_args) -> None:
        samples.append(heap_in_use())

    hooks = [m.register_forward_hook(sample) for m in model.modules()]
    hooks += [m.register_full_backward_hook(sample) for m in model.modules() if next(m.children(), None) is None]
    gc.collect()  # garbage left by earlier work is freed now, not in the middle of the measured step
    gc.disable()
    base = heap_in_use()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # full backward hooks on modules whose inputs need no grad
            step()
        sample()
    finally:
        gc.enable()
    for hook in hooks:
        hook.remove()
    return (max(samples) - base) / 2**20


def peak_memory(name: str, cfg: BenchConfig) -> float:
    code = (
        "import json, sys; from poslab.tools.bench import BenchConfig, peak_memory_child; "
        f"print(json.dumps(peak_memory_child({name!r}, BenchConfig(**{cfg.__dict__!r}))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(json.loads(out.stdout.strip().splitlines()[-1]))


#: The targets hold at this length; other lengths are reported without a verdict.
TARGET_LENGTH = 1024
#: The default run's lengths: the target length and the long ones (5 min on a 2-core CPU).
DEFAULT_LENGTHS = (TARGET_LENGTH, *LONG_LENGTHS)
#: Keys of every record in ``results.json``.
RECORD_KEYS = ("encoder", "seq_len", "step_ms", "peak_mem_mb", "time_ratio", "memory_ratio")


def timed_at(name: str, length: int) -> bool:
    """Whether a run without ``--encoders`` times ``name`` at ``length``: ``none`` always; up to the target
    length, every targeted encoder; past it, the additive biases only (held to :data:`LONG_BIAS_TARGET` at
    the long lengths), a bias laid out ``L x L`` by design (one not built from its offsets: FIRE, 4x the time
    and memory per doubling of L) no further than the first long length. An encoder without a target (CoPE
    writes the ``L x L`` logits out: 32x ``none`` at 1024) only below the target length."""
    from poslab.encoders import encoder_class  # deferred: torch, ~2.6 s

    if name == "none":
        return True
    if name not in TARGETS:
        return length < TARGET_LENGTH
    if length <= TARGET_LENGTH:
        return True
    kind = encoder_class(name)
    return kind.uses("attention_bias") and (length <= LONG_LENGTHS[0] or kind.uses("relative_bias"))


def target_at(name: str, length: int) -> tuple[float | None, float | None]:
    """(time, memory) ratios ``name`` is held to at ``length``: :data:`TARGETS` at the target length, and
    :data:`LONG_BIAS_TARGET` at :data:`LONG_LENGTHS` for an encoder with an additive bias (from its hooks)."""
    from poslab.encoders import encoder_class  # deferred: torch, ~2.6 s

    if length == TARGET_LENGTH:
        return TARGETS.get(name, (None, None))
    if length in LONG_LENGTHS and name in TARGETS and encoder_class(name).uses("attention_bias"):
        return LONG_BIAS_TARGET
    return None, None


def run(cfg: BenchConfig, lengths: list[int] | None = None, encoders: list[str] | None = None) -> list[dict]:
    """One record per (length, encoder); ratios are against ``none`` at the same length, same run.

    ``encoders``: a subset of the 1D encoders (``none`` is always timed, as the reference), each at every
    length; an unknown one is a one-line :class:`~poslab.errors.ConfigError` naming the valid ones. Without
    it, every 1D encoder, each at the lengths :func:`timed_at` allows."""
    from poslab.encoders import available_encoders  # deferred: torch, ~2.6 s

    valid = available_encoders(sequence_modality())
    unknown = [n for n in encoders or [] if n not in valid]
    if unknown:
        raise ConfigError(f"bench: unknown 1D encoder '{unknown[0]}'; valid: {', '.join(valid)}")
    chosen = ["none", *[n for n in (encoders or valid) if n != "none"]]
    rows = []
    for length in lengths or [cfg.length]:
        at = replace(cfg, length=length)
        names = chosen if encoders else [n for n in chosen if timed_at(n, length)]
        samples = time_samples(names, at)
        times, ratios = {n: statistics.median(v) for n, v in samples.items()}, round_ratios(samples)
        memory = {n: peak_memory(n, at) for n in names}
        for name in names:
            time_ratio, mem_ratio = ratios[name], memory[name] / max(memory["none"], 1e-9)
            target_t, target_m = target_at(name, length)
            ok = None
            if target_t is not None:
                ok = time_ratio <= target_t and (target_m is None or mem_ratio <= target_m)
            target = "—" if target_t is None else f"≤{target_t}x time" + (f", ≤{target_m}x mem" if target_m else "")
            values = (name, length, times[name], memory[name], time_ratio, mem_ratio)
            rows.append(dict(zip(RECORD_KEYS, values, strict=True)) | {"target": target, "ok": ok})
    return rows


def untimed_note(lengths: list[int]) -> str:
    """One line naming what a run without ``--encoders`` left out at ``lengths``, and how to time it."""
    from poslab.encoders import available_encoders  # deferred: torch, ~2.6 s

    left_out: dict[str, list[str]] = {}  # the lengths an encoder was left out at -> those encoders
    for name in available_encoders(sequence_modality()):
        at = ", ".join(str(x) for x in lengths if not timed_at(name, x))
        if at:
            left_out.setdefault(at, []).append(name)
    if not left_out:
        return "every 1D encoder timed at every length"
    parts = "; ".join(f"{', '.join(names)} at L = {at}" for at, names in left_out.items())
    names = " ".join(n for group in left_out.values() for n in group)
    return f"not timed (no target there, or L x L by design): {parts}; --encoders {names} times them at every length"


def write_results(rows: list[dict], path: Path) -> Path:
    """``results.json`` written atomically: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".json.partial")
    partial.write_text(json.dumps(rows, indent=1))
    partial.replace(path)
    return path


def main(argv: list[str] | None = None) -> int:

    parser = argparse.ArgumentParser(prog="poslab bench", description=__doc__.splitlines()[0])
    for key, value in BenchConfig().__dict__.items():
        if key != "length":
            parser.add_argument(f"--{key}", type=type(value), default=value)
    parser.add_argument("--lengths", type=int, nargs="+", default=list(DEFAULT_LENGTHS), help="sequence lengths L")
    parser.add_argument("--encoders", nargs="+", help="a subset of the 1D encoders (none is always timed)")
    parser.add_argument("--out", type=Path, default=Path("reports/bench/results.json"), help="records as JSON")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = vars(parser.parse_args(argv))
    lengths, out, check, encoders = args.pop("lengths"), args.pop("out"), args.pop("check"), args.pop("encoders")
    cfg = BenchConfig(**args)
    try:
        rows = run(cfg, lengths, encoders)
    except ConfigError as exc:
        print(f"poslab: error: {exc}", file=sys.stderr)
        return 2
    table = Table(
        title=f"1D encoders, one training step: batch {cfg.batch}, {cfg.depth}x{cfg.dim}, {cfg.heads} heads, "
        f"{cfg.device}; ratios to none at the same L (targets at L={TARGET_LENGTH}; biases also at "
        f"{', '.join(map(str, LONG_LENGTHS))})"
    )
    for column in ("L", "encoder", "step ms", "x none", "peak MB", "x none", "target", "ok"):
        table.add_column(column, justify="left" if column in ("encoder", "target") else "right")
    for r in rows:
        table.add_row(
            str(r["seq_len"]),
            r["encoder"],
            f"{r['step_ms']:.1f}",
            f"{r['time_ratio']:.2f}",
            f"{r['peak_mem_mb']:.0f}",
            f"{r['memory_ratio']:.2f}",
            r["target"],
            {True: "yes", False: "NO", None: ""}[r["ok"]],
        )
    Console().print(table)
    if not encoders:
        print(untimed_note(lengths))
    print(f"records: {write_results(rows, out)}")
    return 1 if check and any(r["ok"] is False for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
