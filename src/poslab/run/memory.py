"""Will the model fit? Counted before anything is allocated, so a size that cannot fit is one line at once.

The task is built on PyTorch's ``meta`` device (shapes, no storage: 0.1-0.2 s for a 10^10-parameter model),
its parameters counted, and training's resident bytes estimated at 16 per parameter: float32 weights,
gradients and Adam's two moments (Rajbhandari et al. 2020, ZeRO, sec. 3.1). Activations come on top and are
not estimated; an allocation that fails later is still caught (``poslab.errors.memory_problem``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from poslab.errors import ConfigError

#: Bytes a trained float32 parameter holds: weight, gradient, two Adam moments (ZeRO, sec. 3.1).
BYTES_PER_PARAMETER = 16


def available_bytes(accelerator: str) -> int | None:
    """Memory a run may use: the GPU's total on ``gpu`` / ``cuda`` / ``auto`` with a GPU, else the host's
    available memory (Linux's ``MemAvailable``; total physical memory elsewhere). None where it cannot be read."""
    import torch  # deferred: torch, ~2.3 s

    if accelerator in ("gpu", "cuda", "auto") and torch.cuda.is_available():
        return torch.cuda.mem_get_info()[1]
    meminfo = Path("/proc/meminfo")
    if meminfo.is_file():
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def counted_parameters(build: Any) -> int | None:
    """Parameters of the module ``build()`` returns, built on the meta device; None if it cannot be built there."""
    import torch  # deferred: torch, ~2.3 s

    try:
        with torch.device("meta"):
            module = build()
    except Exception:  # noqa: BLE001 (a module that needs real data to build is counted by its allocation)
        return None
    return sum(p.numel() for p in module.parameters())


def check_fits(build: Any, accelerator: str) -> None:
    """Refuse, in one line, a model whose training state alone exceeds the memory there is."""
    count, available = counted_parameters(build), available_bytes(accelerator)
    if count is None or available is None:
        return
    needed = count * BYTES_PER_PARAMETER
    if needed > available:
        raise ConfigError(
            f"the model does not fit in this machine's memory: {count:,} parameters need {needed / 2**30:.1f} GiB "
            f"for weights, gradients and optimiser moments, {available / 2**30:.1f} GiB is available; "
            "lower model.dim, model.depth or model.mlp_ratio"
        )
