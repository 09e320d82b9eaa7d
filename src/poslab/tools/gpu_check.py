"""``make gpu-check``: what a CUDA machine must show before its numbers are trusted. One table.

1. **train**: each modality for a few dozen steps under ``trainer=gpu`` (bf16-mixed) with one encoder
   per hook family; every loss finite.
2. **flex**: FlexAttention's ``score_mod`` path against SDPA with the laid-out bias, forward and
   gradients (of q, k, v and of the bias: a learned one trains through them), for every encoder with an
   additive bias, offset-only or dense (1e-5 in float32, 1e-2 in bf16).
3. **speed**: the text model at GPT-2-small size (12 layers, width 768, 12 heads, L = 1024, bf16 autocast,
   compiled): tokens/s, MFU and peak memory for ``none``, ``rope``, ``alibi``, ``t5``. Model FLOPs per
   token are 6·N (N: parameters outside the embeddings) plus 12·layers·L·width for attention (forward
   2·L·width per layer for each of QKᵀ and PV, backward twice that; causal masking not discounted), as
   in PaLM (Chowdhery et al. 2022, appendix B); MFU divides by the device's peak dense bf16 FLOP/s
   (:data:`poslab.run.throughput.PEAK_BF16`, or ``--peak-tflops``); a training run logs the same
   as ``perf/mfu``.
4. **memory**: peak memory of one training step against L (batch 1) for ``none`` and ``alibi``: the
   bias costs no ``L x L`` memory when it grows as ``none``'s does.

``--dry-run`` runs the same steps at toy sizes on the CPU (no compile, no flex), so the script is
exercised where no GPU is; its figures mean nothing. Every import sits in the check that needs it: on a bare
GPU machine (``PYTHONPATH=src``, no ``make install``) a missing package fails that check's row, not the script.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

#: (modality, encoder): each modality, one encoder per hook family (input, rotation 2D/1D/3D, offset bias,
#: table, time), and the two that step out of bf16 autocast on purpose.
TRAIN_CASES = [
    ("vision", "sincos2d"),
    ("vision", "rope2d"),
    ("text", "rope"),
    ("text", "alibi"),
    ("text", "t5"),
    ("text", "learned"),
    ("timeseries", "cyclic"),
    ("video", "rope3d"),
    ("vision", "liere"),  # matrix_exp, kept in float32 under autocast
    ("text", "cope"),  # logits written out, in float32 under autocast
]
SPEED_ENCODERS = ["none", "rope", "alibi", "t5"]
#: Seconds after which no further check starts (the whole check is meant to take under 8 minutes).
BUDGET_S = 420.0


@dataclass
class Sizes:
    """What the check runs at: the real sizes on a GPU, toy ones for a CPU dry run."""

    device: str
    steps: int = 50
    width: int = 768
    depth: int = 12
    heads: int = 12
    length: int = 1024
    batch: int = 16
    timed_steps: int = 20
    memory_lengths: tuple[int, ...] = (2048, 4096, 8192, 16384)
    compile: bool = True

    @classmethod
    def dry_run(cls) -> Sizes:
        return cls("cpu", steps=4, width=64, depth=2, heads=4, length=64, batch=2, timed_steps=2,
                   memory_lengths=(64, 128), compile=False)  # fmt: skip


@dataclass
class Row:
    check: str
    case: str
    value: str
    ok: bool

    def cells(self) -> list[str]:
        return [self.check, self.case, self.value, "ok" if self.ok else "FAIL"]


# -- 1. training -------------------------------------------------------------------
def train_rows(sizes: Sizes, root: Path) -> list[Row]:
    """A short run of each case; the row holds its test metrics, ok when every loss is finite."""
    from poslab.config.composition import compose
    from poslab.run.train import train

    rows = []
    for modality, encoder in TRAIN_CASES:
        overrides = [
            f"modality={modality}",
            f"encoder={encoder}",
            "trainer=gpu" if sizes.device == "cuda" else "trainer=cpu",
            "logger=none",
            f"run.root={root}",
            f"trainer.max_steps={sizes.steps}",
            "trainer.max_epochs=1000",
            "trainer.check_val_every_n_epoch=null",
            f"trainer.val_check_interval={sizes.steps}",
            "trainer.limit_val_batches=2",
            "trainer.limit_test_batches=2",
            "trainer.enable_progress_bar=false",
        ]
        if "multiples" in compose([f"modality={modality}"]).eval:  # a length study: two lengths are enough here
            overrides.append("eval.multiples=[1,2]")
        start = time.perf_counter()
        try:
            summary = train(compose(overrides))
        except Exception as exc:  # the table says what failed; the other cases still run
            rows.append(Row("train", f"{modality}/{encoder}", one_line(exc), False))
            continue
        losses = {k: v for k, v in summary["metrics"].items() if k.startswith(("train/", "val/", "test/"))
                  and k.endswith(("loss", "mse"))}  # fmt: skip
        finite = bool(losses) and all(math.isfinite(v) for v in losses.values())
        shown = ", ".join(f"{k}={v:.4g}" for k, v in sorted(losses.items()) if k.startswith(("test/", "train/")))
        rows.append(Row("train", f"{modality}/{encoder}", f"{shown} ({time.perf_counter() - start:.0f} s)", finite))
    return rows


# -- 2. FlexAttention against SDPA ------------------------------------------------------
def flex_rows(sizes: Sizes) -> list[Row]:
    """Forward and gradients of the score_mod path against SDPA with the bias laid out, per bias encoder."""
    import torch

    from poslab.nn.kernels import flex

    if not flex.AVAILABLE or sizes.device != "cuda":
        return [Row("flex", "score_mod vs SDPA", "skipped: needs CUDA and FlexAttention", sizes.device != "cuda")]
    torch._dynamo.reset()  # the training runs' compiled FlexAttention entries count toward dynamo's limit
    rows = []
    for name in bias_encoders():
        for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 1e-2)):
            try:
                error = flex_error(name, dtype)
            except Exception as exc:  # the table says what failed; the other cases still run
                rows.append(Row("flex", f"{name} {str(dtype)[6:]}", one_line(exc), False))
                continue
            rows.append(Row("flex", f"{name} {str(dtype)[6:]}", f"max |Δ| {error:.2e} (tol {tol:g})", error <= tol))
    return rows


def bias_encoders() -> list[str]:
    """Every registered encoder with an additive bias (read from its hooks): offset-only or dense."""
    from poslab.encoders import available_encoders, encoder_class

    return [name for name in available_encoders() if encoder_class(name).uses("attention_bias")]


def flex_error(
    name: str, dtype, length: int = 512, heads: int = 8, head_dim: int = 64, device: str = "cuda",
    backward: bool = True,
) -> float:  # fmt: skip
    """Largest difference, each scaled by its size, between flex (compiled on CUDA) and SDPA with the bias
    laid out: the output and, with ``backward``, the gradients of q, k, v and of what the bias is made of
    (an offset-only bias's ``[H, 2L − 1]`` values, read by the score_mod; else the dense bias)."""
    import torch
    import torch.nn.functional as F

    from poslab.encoders import build_encoder_in_context, encoder_defaults
    from poslab.nn.kernels import flex
    from poslab.positions import Positions
    from poslab.positions.offsets import toeplitz_offsets

    defaults = encoder_defaults(name)
    encoder = build_encoder_in_context(
        name, dim=heads * head_dim, num_heads=heads, options=defaults,
        context={"max_len": length, "bidirectional": False},
    ).to(device)  # fmt: skip
    i = torch.arange(length, device=device)
    if encoder.uses("relative_bias"):
        made_of = encoder.relative_bias(toeplitz_offsets(length, length, device=device)).float()

        def laid_out(values):  # bias[h, q, k] = values[h, k − q]
            return values[:, i[None, :] - i[:, None] + length - 1]

        def score_mod(values):
            return flex.offset_score_mod(values, length)
    else:
        steps = Positions.consecutive(length, device=device)
        made_of = encoder.attention_bias(steps, steps).float().reshape(1, heads, length, length)

        def laid_out(bias):
            return bias[0]

        score_mod = flex.dense_score_mod
    generator = torch.Generator(device=device).manual_seed(0)
    q, k, v, grad = (torch.randn(2, heads, length, head_dim, device=device, dtype=dtype, generator=generator)
                     for _ in range(4))  # fmt: skip
    # plus noise: a learned bias starts at zero (T5, Shaw), which would leave the bias's path untested
    made_of = made_of.detach() + torch.randn(made_of.shape, device=device, generator=generator)

    def outputs(fn):
        leaves = [t.detach().clone().requires_grad_(backward) for t in (q, k, v, made_of)]
        out = fn(*leaves)
        if not backward:
            return [out.detach().float()]
        out.backward(grad)
        return [out.detach().float(), *(t.grad.float() for t in leaves)]

    def reference(q, k, v, made_of):
        dense = laid_out(made_of).to(dtype).masked_fill(i[None, :] > i[:, None], float("-inf"))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=dense[None])

    block_mask = flex.causal_block_mask(length, length, device)
    tested = outputs(lambda q, k, v, made_of: flex.flex_bias_attention(
        q, k, v, score_mod(made_of), block_mask, compiled=device == "cuda"))  # fmt: skip
    pairs = zip(tested, outputs(reference), strict=True)
    return max(((a - b).abs().max() / b.abs().max().clamp_min(1)).item() for a, b in pairs)


# -- 3. speed and 4. memory -----------------------------------------------------------
def gpt2_small(name: str, sizes: Sizes, length: int, batch: int):
    """(one training step, the model) of the sequence modality's model at GPT-2-small width and depth, bf16."""
    from poslab.modalities import get_modality
    from poslab.tools.bench import sequence_modality

    build_step = get_modality(sequence_modality()).piece("training_step")
    cuda = sizes.device == "cuda"
    step = build_step(name, dim=sizes.width, depth=sizes.depth, num_heads=sizes.heads, length=length, batch=batch,
                      vocab_size=50304, device=sizes.device, compile=sizes.compile, bf16=cuda)  # fmt: skip
    return step, step.model


def flops_per_token(model, sizes: Sizes, length: int) -> float:
    """6·N for the weights outside the embeddings plus 12·depth·L·width for attention (PaLM, appendix B)."""
    from poslab.run.throughput import token_flops, weight_count

    return token_flops(weight_count(model), sizes.depth, sizes.width, length)


def synchronize(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def speed_rows(sizes: Sizes, peak: float | None) -> list[Row]:
    import torch

    rows, base = [], None
    for name in SPEED_ENCODERS:
        try:
            step, model = gpt2_small(name, sizes, sizes.length, sizes.batch)
            for _ in range(3):  # compile and warm up
                step()
            synchronize(sizes.device)
        except Exception as exc:  # the table says what failed; the other cases still run
            rows.append(Row("speed", f"{name} L={sizes.length} B={sizes.batch}", one_line(exc), False))
            release(sizes.device)
            continue
        if sizes.device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        for _ in range(sizes.timed_steps):
            step()
        synchronize(sizes.device)
        seconds = (time.perf_counter() - start) / sizes.timed_steps
        tokens = sizes.batch * sizes.length / seconds
        mfu = tokens * flops_per_token(model, sizes, sizes.length) / peak if peak else None
        memory = f"{torch.cuda.max_memory_allocated() / 2**30:.1f} GiB" if sizes.device == "cuda" else "-"
        base = base or seconds
        value = (f"{tokens:,.0f} tok/s, step {1e3 * seconds:.1f} ms ({seconds / base:.2f}x none), "
                 f"MFU {'-' if mfu is None else f'{100 * mfu:.1f} %'}, peak {memory}")  # fmt: skip
        rows.append(Row("speed", f"{name} L={sizes.length} B={sizes.batch}", value, math.isfinite(tokens)))
        del step, model
        release(sizes.device)
    return rows


def memory_rows(sizes: Sizes) -> list[Row]:
    import torch

    rows = []
    eager = replace(sizes, compile=False)  # memory is the question here; compiling each length costs minutes
    for length in sizes.memory_lengths:
        peaks = {}
        for name in ("none", "alibi"):
            try:
                step, model = gpt2_small(name, eager, length, 1)
                step()
                synchronize(sizes.device)
                if sizes.device == "cuda":
                    torch.cuda.reset_peak_memory_stats()
                step()
                synchronize(sizes.device)
                peaks[name] = torch.cuda.max_memory_allocated() / 2**30 if sizes.device == "cuda" else None
                del step, model
            except Exception as exc:  # the table says what failed; the other cases still run
                peaks[name] = one_line(exc)
            release(sizes.device)
        failed = [f"{name}: {peak}" for name, peak in peaks.items() if isinstance(peak, str)]
        if failed:
            rows.append(Row("memory", f"L={length} B=1", "; ".join(failed), False))
            continue
        if peaks["none"] is None:
            rows.append(Row("memory", f"L={length} B=1", "- (peak memory is measured on CUDA only)", True))
            continue
        ratio = peaks["alibi"] / peaks["none"]
        value = f"none {peaks['none']:.2f} GiB, alibi {peaks['alibi']:.2f} GiB ({ratio:.2f}x)"
        rows.append(Row("memory", f"L={length} B=1", value, ratio <= 1.1))
    return rows


def one_line(exc: BaseException) -> str:
    """An error as one table cell: its type and the first line that says something (Inductor's errors open
    with a blank line)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}".replace("|", "/")[:300]


def release(device: str) -> None:
    import gc

    import torch

    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
    torch._dynamo.reset()


def peak_flops(override_tflops: float | None) -> float | None:
    import torch

    from poslab.run.throughput import peak_flops as device_peak

    if override_tflops:
        return override_tflops * 1e12
    return device_peak(torch.device("cuda")) if torch.cuda.is_available() else None


def table(rows: list[Row], header: str) -> str:
    """One Markdown table (it pastes into docs/results.md as it is)."""
    from poslab.track.tables import markdown_table

    return "\n".join([header, "", *markdown_table(["check", "case", "result", "status"], (r.cells() for r in rows))])


def main(argv: list[str] | None = None) -> int:
    import torch

    parser = argparse.ArgumentParser(prog="poslab gpu-check", description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="toy sizes on the CPU: exercise the script only")
    parser.add_argument("--peak-tflops", type=float, help="the device's peak dense bf16 TFLOP/s (for MFU)")
    parser.add_argument("--only", nargs="*", choices=["train", "flex", "speed", "memory"], help="a subset")
    parser.add_argument(
        "--budget", type=float, help=f"seconds past which no check starts (default {BUDGET_S:.0f}; none in a dry run)"
    )
    args = parser.parse_args(argv)
    if not args.dry_run and not torch.cuda.is_available():
        print("poslab gpu-check: error: no CUDA device is present (run it on a GPU machine, or --dry-run)",
              file=sys.stderr)  # fmt: skip
        return 2
    sizes = Sizes.dry_run() if args.dry_run else Sizes("cuda")
    budget = args.budget if args.budget is not None else (math.inf if args.dry_run else BUDGET_S)
    peak = peak_flops(args.peak_tflops)
    device = torch.cuda.get_device_name() if sizes.device == "cuda" else "CPU (dry run: figures mean nothing)"
    wanted = args.only or ["train", "flex", "speed", "memory"]
    start = time.perf_counter()
    rows: list[Row] = []
    done = 0
    with tempfile.TemporaryDirectory(prefix="poslab-gpu-check-") as root:
        for part in wanted:
            part_start = time.perf_counter()
            if part_start - start > budget:  # the table still comes out, with what did not run
                rows.append(Row(part, "not run", f"the {budget:.0f} s budget was spent", False))
                continue
            try:
                if part == "train":
                    rows += train_rows(sizes, Path(root))
                elif part == "flex":
                    rows += flex_rows(sizes)
                elif part == "speed":
                    rows += speed_rows(sizes, peak)
                else:
                    rows += memory_rows(sizes)
            except Exception as exc:  # the table still comes out, with what broke
                rows.append(Row(part, "error", one_line(exc), False))
            print(f"[gpu-check] {part} done in {time.perf_counter() - part_start:.0f} s", file=sys.stderr, flush=True)
            print(table(rows[done:], f"[gpu-check] {part} so far:"), file=sys.stderr, flush=True)  # kept if killed
            done = len(rows)
    header = (f"poslab gpu-check on {device}, torch {torch.__version__}, "
              f"{time.strftime('%Y-%m-%d')}, {time.perf_counter() - start:.0f} s; "
              f"MFU against {'-' if peak is None else f'{peak / 1e12:.0f}'} TFLOP/s bf16")  # fmt: skip
    print(table(rows, header))
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
