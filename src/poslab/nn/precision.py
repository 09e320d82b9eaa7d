"""Regions that stay in float32 under mixed precision (``trainer.precision=bf16-mixed``).

Autocast runs matmuls and einsums in bf16. A few computations must not be:
``torch.linalg.matrix_exp`` has no autocast rule, so fed a bf16 generator it
runs in bf16 and returns NaNs (LieRE's rotations), and logits written out by
hand (CoPE) lose the float32 accuracy the fused kernels keep.
"""

from __future__ import annotations

import contextlib

import torch


def full_precision(device: torch.device | str):
    """Autocast off on ``device`` for the ``with`` block; nothing where the device has no autocast (meta)."""
    kind = torch.device(device).type
    if torch.amp.is_autocast_available(kind):
        return torch.autocast(kind, enabled=False)
    return contextlib.nullcontext()
