"""What a training step costs: tokens per second and model FLOPs utilisation (MFU), so a comparison of encoders
also compares their price.

Model FLOPs of a step (PaLM, Chowdhery et al. 2022, appendix B): ``6·N`` per token for the weights (forward
2·N, backward 4·N; ``N``: the parameters outside embedding tables, which are looked up, not multiplied) plus
``12·n_layer·d·T`` per token for attention (``QKᵀ`` and ``PV``, forward and backward, over a sequence of ``T``
tokens of width ``d``; causal masking not discounted). Recomputation (activation checkpointing) is not counted:
model FLOPs, not hardware FLOPs. ``make gpu-check`` counts the same.

MFU divides the model FLOPs per second by the device's peak: for a GPU its dense bf16 tensor-core figure
(:data:`PEAK_BF16`, the vendors' data sheets, as nanoGPT and ``make gpu-check`` use it); for the CPU a measured
peak, the best of a few dense float32 matmuls at the run's thread count, measured once and kept in
``~/.cache/poslab/peak_flops.json`` (``$POSLAB_CACHE``, ``$XDG_CACHE_HOME``), named by the CPU, the threads and
torch's version.
Lightning's ``get_available_flops`` is not used: its H200 entries are the data sheet's sparse figures (2.0e15
bf16, twice the dense 989e12) and a device named plainly ``NVIDIA H200`` finds none of them.
"""

from __future__ import annotations

import json
import platform
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from poslab.files import cache_folder, write_json_atomic

#: Peak dense bf16 tensor-core FLOP/s by device name (vendor data sheets, SXM parts).
PEAK_BF16 = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "L4": 121e12}
#: The CPU's matmul: its side, and how many are timed (the best one counts).
CPU_MATMUL_SIZE, CPU_MATMUL_REPEATS = 1024, 5


def weight_count(model: nn.Module) -> int:
    """``N``: the parameters outside embedding tables (a table tied to an output layer is counted: there it
    multiplies), each shared one once."""
    tables = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    used = {id(p) for m in model.modules() if not isinstance(m, nn.Embedding) for p in m.parameters(recurse=False)}
    return sum(p.numel() for p in model.parameters() if id(p) not in tables or id(p) in used)


@dataclass(frozen=True)
class StepShape:
    """What one training step's backbone passes saw, on one device: ``tokens`` (Σ batch·length) and
    ``token_lengths`` (Σ batch·length², which attention's FLOPs grow by), through ``depth`` layers of ``width``."""

    samples: int
    tokens: int
    token_lengths: int
    depth: int
    width: int

    def model_flops(self, weights: int) -> float:
        """PaLM appendix B: 6·N per token, plus 12·n_layer·d·T per token of a length-T sequence."""
        return 6.0 * weights * self.tokens + 12.0 * self.depth * self.width * self.token_lengths


def token_flops(weights: int, depth: int, width: int, length: int) -> float:
    """Model FLOPs per token of a length-``length`` sequence (what ``make gpu-check`` divides by)."""
    return StepShape(1, length, length * length, depth, width).model_flops(weights) / length


def peak_flops(device: torch.device) -> float | None:
    """The device's peak FLOP/s: the data sheet's dense bf16 for a known GPU, a measured matmul peak for the
    CPU, None otherwise (no MFU then)."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        return next((v for k, v in PEAK_BF16.items() if k in name), None)
    if device.type == "cpu":
        return cpu_peak_flops(torch.get_num_threads())
    return None


def cache_path() -> Path:
    """``$POSLAB_CACHE/peak_flops.json``, by default under ``$XDG_CACHE_HOME/poslab`` (``~/.cache/poslab``)."""
    return cache_folder() / "peak_flops.json"


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_peak_flops(threads: int) -> float:
    """Float32 matmul FLOP/s on ``threads`` threads: measured once per CPU, thread count and torch version,
    then read from the cache (one unreadable or unwritable is measured again, never an error)."""
    key = f"{cpu_name()} | {threads} threads | float32 | torch {torch.__version__}"
    path = cache_path()
    try:
        known = json.loads(path.read_text())
        if isinstance(known, dict) and isinstance(known.get(key), float):
            return known[key]
    except (OSError, ValueError):
        known = {}
    measured = measure_matmul_flops(threads)
    try:
        write_json_atomic(path, {**(known if isinstance(known, dict) else {}), key: measured})
    except OSError:
        pass  # a read-only home: measured again next time
    return measured


def measure_matmul_flops(threads: int, size: int = CPU_MATMUL_SIZE, repeats: int = CPU_MATMUL_REPEATS) -> float:
    """2·n³ FLOPs over the fastest of ``repeats`` ``n × n`` float32 matmuls (after one to warm up). Its own
    generator: measured during a run, it must not move the global RNG the run's draws come from."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        generator = torch.Generator().manual_seed(0)
        a, b = torch.randn(size, size, generator=generator), torch.randn(size, size, generator=generator)
        torch.mm(a, b)
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            torch.mm(a, b)
            best = min(best, time.perf_counter() - start)
    finally:
        torch.set_num_threads(before)
    return 2.0 * size**3 / best
