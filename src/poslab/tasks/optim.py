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
    schedule = torch.optim.lr_scheduler.OneCycleLR(
        optimizer,
        max_lr=optim_cfg["lr"],
        total_steps=max(1, int(total_steps)),
        pct_start=optim_cfg["warmup_fraction"],
    )
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step", "name": "train/lr"}}
