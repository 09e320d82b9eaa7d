"""Optimiser shared by the tasks: AdamW + one-cycle, no decay on position and norm parameters."""

from __future__ import annotations

import torch
from torch import nn


def parameter_groups(model: nn.Module, weight_decay: float, no_decay_modules: tuple[nn.Module, ...] = ()):
    """Decay matrices only: biases, norms, tokens and position parameters are exempt (as in ViT / MAE)."""
    exempt = {id(p) for m in no_decay_modules for p in m.parameters()}
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        if param.ndim <= 1 or id(param) in exempt or name.endswith("token"):
            no_decay.append(param)
        else:
            decay.append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def adamw_one_cycle(module, optim_cfg, total_steps: int, no_decay_modules=()):
    """Lightning ``configure_optimizers`` value: AdamW with a per-step one-cycle schedule."""
    optimizer = torch.optim.AdamW(
        parameter_groups(module, optim_cfg["weight_decay"], no_decay_modules),
        lr=optim_cfg["lr"],
        betas=tuple(optim_cfg["betas"]),
    )
    steps = max(2, int(total_steps))
    schedule = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=optim_cfg["lr"], total_steps=steps, pct_start=warmup_fraction(optim_cfg, steps)
    )
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step", "name": "train/lr"}}


def warmup_fraction(optim_cfg, steps: int) -> float:
    """``optim.warmup_fraction``, kept where OneCycleLR can run: each phase needs a step of its own (a
    fraction under 1.5 / steps would give the warmup zero steps, and OneCycleLR divides by its length)."""
    return min(max(float(optim_cfg["warmup_fraction"]), 1.5 / steps), 1 - 0.5 / steps)
