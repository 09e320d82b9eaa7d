"""Optimiser and schedule from config: ``optim.name`` among ``torch.optim``'s optimisers (AdamW by default),
``sched.name`` among a few per-step schedules sized to the run (one-cycle by default) or any of
``torch.optim.lr_scheduler``'s by class name (``StepLR``, ``ReduceLROnPlateau``, ``MultiStepLR`` …, their
arguments typed from their signatures); no weight decay on position and norm parameters. The defaults build
exactly the AdamW + one-cycle every run had before these became options."""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import field
from typing import Annotated, Any, Literal, Optional

import torch
from torch import nn

from poslab.config.options import keyword_options, signature_schema
from poslab.config.ranges import AT_LEAST_0, AT_LEAST_1, FRACTION, POSITIVE, Range
from poslab.entry_points import import_class
from poslab.errors import ConfigError, did_you_mean

#: Optimisers ``optim.name`` may not name, and why: each needs what a config cannot give it.
UNSUPPORTED = {
    "lbfgs": "it re-evaluates the loss in a closure and takes no parameter groups",
    "sparseadam": "it needs sparse gradients",
    "muon": "it updates matrices only, and every model here has vectors (norms, biases) too",
}
DEFAULT_OPTIMIZER = "adamw"
#: The optimiser's arguments poslab supplies (its parameters, in groups that carry the weight decay).
SUPPLIED = ("params",)
#: Ranges of the optimisers' arguments, by name wherever an optimiser takes it (their signatures carry none).
RANGES = {
    "lr": POSITIVE,
    "weight_decay": AT_LEAST_0,
    "betas": FRACTION,  # each
    "momentum": AT_LEAST_0,
    "eps": AT_LEAST_0,
    "dampening": Range(0, 1),  # SGD: the share of the gradient left out of the momentum; torch checks none
    "lr_decay": AT_LEAST_0,  # Adagrad
    "alpha": AT_LEAST_0,  # RMSprop's smoothing
    "rho": Range(0, 1),  # Adadelta
    "initial_accumulator_value": AT_LEAST_0,
    "momentum_decay": AT_LEAST_0,  # NAdam
    "lambd": AT_LEAST_0,  # ASGD
    "t0": AT_LEAST_0,
}
#: The optim node's keys that are poslab's, not the optimiser's.
OWN_KEYS = ("name", "warmup_fraction")


def optimizers() -> dict[str, type[torch.optim.Optimizer]]:
    """``torch.optim``'s optimisers by lower-case name (``adamw``, ``sgd``, ``rmsprop``, ...)."""
    found = {
        name.lower(): cls
        for name, cls in vars(torch.optim).items()
        if isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer) and cls is not torch.optim.Optimizer
    }
    return {k: v for k, v in sorted(found.items()) if k not in UNSUPPORTED}


def optimizer_class(name: str) -> type[torch.optim.Optimizer]:
    """``optim.name``'s class: one of torch's by lower-case name, or any Optimizer by import path
    (``mypkg.optim.Lion``, LightningCLI's ``class_path``)."""
    known = optimizers()
    if "." in name:
        return import_class(name, torch.optim.Optimizer, "optim.name")
    if name not in known:
        why = f": {UNSUPPORTED[name]}" if name in UNSUPPORTED else did_you_mean(name, list(known))
        raise ConfigError(f"optim.name cannot be {name!r}{why}; valid: {', '.join(known)} or a class's import path")
    return known[name]


@functools.cache
def optimizer_schema(name: str) -> type:
    """``optim.*`` for optimiser ``name``: poslab's keys and the optimiser's constructor arguments, its
    defaults (sparse: a config holds what it sets)."""

    known = {**optimizers(), name: optimizer_class(name)}
    leading = [
        ("name", Literal[tuple(known)], field(default=DEFAULT_OPTIMIZER)),  # type: ignore[misc]
        (
            "warmup_fraction",
            Annotated[float, FRACTION],
            field(default=0.0),
        ),  # the schedule's warmup: a share of the steps
    ]
    schema = signature_schema(f"Optim_{name}", known[name], skip=SUPPLIED, leading=leading, ranges=RANGES)
    own = {f.name for f in dataclasses.fields(schema)}
    # Another optimiser's options a modality or experiment tunes (text's AdamW betas) do not apply to this one.
    schema.foreign = {k for other in known.values() for k in keyword_options(other, SUPPLIED)} - own
    schema.label = f"optim.name={name}"
    schema.check = check_arguments
    return schema


def check_arguments(optim_cfg: dict[str, Any]) -> None:
    """The optimiser built once over a one-weight model, before anything is written, so its own argument checks
    (RMSprop's ``alpha``, Adadelta's ``rho``, ...) are one line instead of a traceback once the fit starts."""
    try:
        build_optimizer(nn.Linear(1, 1), optim_cfg)
    except (ValueError, TypeError) as exc:
        name = optim_cfg.get("name", DEFAULT_OPTIMIZER)
        raise ConfigError(f"optim.name={name} refuses its options: {str(exc).splitlines()[0]}") from None


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


def build_optimizer(module: nn.Module, optim_cfg: dict[str, Any], no_decay_modules=()) -> torch.optim.Optimizer:
    """The configured optimiser over ``module``'s parameters; weight decay by group where it takes one."""
    name = optim_cfg.get("name", DEFAULT_OPTIMIZER)
    cls = optimizer_class(name)
    options = {k: v for k, v in optim_cfg.items() if k not in OWN_KEYS}
    options = {k: tuple(v) if isinstance(v, list) else v for k, v in options.items()}  # betas: a tuple
    defaults = {f.name: f.default for f in dataclasses.fields(optimizer_schema(name))}
    decay = options.pop("weight_decay", defaults.get("weight_decay"))
    if "weight_decay" in defaults:
        return cls(parameter_groups(module, decay, no_decay_modules), **options)
    return cls(module.parameters(), **options)  # Rprop, ...: no decay to leave out of any group


# -- schedules: a factor of the peak learning rate per step --------------------------------------------------
def _warmup(step: int, warmup: int) -> float | None:
    """Linear warmup from 1/warmup to 1 over the first ``warmup`` steps (Goyal et al. 2017, sec. 2.2)."""
    return (step + 1) / warmup if step < warmup else None


def constant(step: int, total: int, warmup: int) -> float:
    return _warmup(step, warmup) or 1.0


def cosine(step: int, total: int, warmup: int) -> float:
    """Warmup, then half a cosine down to zero (Loshchilov & Hutter 2017, SGDR eq. 5, one cycle)."""
    ramp = _warmup(step, warmup)
    if ramp is not None:
        return ramp
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return 0.5 * (1 + math.cos(math.pi * progress))


def linear(step: int, total: int, warmup: int) -> float:
    """Warmup, then a straight line down to zero at the last step."""
    ramp = _warmup(step, warmup)
    return ramp if ramp is not None else max(0.0, 1 - (step - warmup) / max(1, total - warmup))


#: ``sched.name`` -> the factor of ``optim.lr`` at a step; ``one_cycle`` is torch's OneCycleLR.
SCHEDULES = {"one_cycle": None, "constant": constant, "cosine": cosine, "linear": linear}
DEFAULT_SCHEDULE = "one_cycle"
#: torch's schedulers ``sched.name`` may not name, and why: each needs what a config cannot give it.
UNSUPPORTED_SCHEDULERS = {
    "LambdaLR": "it takes a function",
    "MultiplicativeLR": "it takes a function",
    "SequentialLR": "it takes other schedulers",
    "ChainedScheduler": "it takes other schedulers",
    "OneCycleLR": "sched.name=one_cycle is it, sized to the run",
}
#: The sched node's keys that are poslab's (Lightning's scheduler settings), not the scheduler's.
SCHED_KEYS = ("name", "interval", "frequency", "monitor")
#: Ranges of the schedulers' arguments, by name wherever one takes it (their signatures carry none).
SCHED_RANGES = {"step_size": AT_LEAST_1, "gamma": POSITIVE, "T_max": AT_LEAST_1, "T_0": AT_LEAST_1,
                "T_mult": AT_LEAST_1, "eta_min": AT_LEAST_0, "factor": POSITIVE, "patience": AT_LEAST_0,
                "cooldown": AT_LEAST_0, "min_lr": AT_LEAST_0, "total_iters": AT_LEAST_0, "power": AT_LEAST_0,
                "threshold": AT_LEAST_0, "eps": AT_LEAST_0}  # fmt: skip


def torch_schedulers() -> dict[str, type]:
    """``torch.optim.lr_scheduler``'s schedulers by class name, but those a config cannot build."""
    found = {
        name: cls
        for name, cls in vars(torch.optim.lr_scheduler).items()
        if isinstance(cls, type) and not name.startswith("_") and name != "LRScheduler"
        and (issubclass(cls, torch.optim.lr_scheduler.LRScheduler) or cls is torch.optim.lr_scheduler.ReduceLROnPlateau)
    }  # fmt: skip
    return {k: v for k, v in sorted(found.items()) if k not in UNSUPPORTED_SCHEDULERS}


@functools.cache
def sched_schema(name: str) -> type:
    """``sched.*`` for schedule ``name``: poslab's per-step schedules take only the name; a torch scheduler its
    constructor's arguments, and Lightning's ``interval`` (``epoch`` by default, as torch's examples step
    them), ``frequency`` and ``monitor`` (ReduceLROnPlateau: the metric it watches; default: the task's)."""
    known = torch_schedulers()
    if "." in name:  # any scheduler class by import path
        known[name] = scheduler_class(name)
    names = (*SCHEDULES, *known)
    if name not in names:
        why = f": {UNSUPPORTED_SCHEDULERS[name]}" if name in UNSUPPORTED_SCHEDULERS else did_you_mean(name, names)
        raise ConfigError(f"sched.name cannot be {name!r}{why}; valid: {', '.join(names)} or a class's import path")
    leading = [("name", Literal[names], field(default=DEFAULT_SCHEDULE))]  # type: ignore[valid-type]
    if name in SCHEDULES:
        schema = dataclasses.make_dataclass(f"Sched_{name}", leading)
    else:
        leading += [
            ("interval", Literal["epoch", "step"], field(default="epoch")),
            ("frequency", Annotated[int, AT_LEAST_1], field(default=1)),
            ("monitor", Optional[str], field(default=None)),
        ]
        schema = signature_schema(f"Sched_{name}", known[name], skip=("optimizer", "last_epoch", "verbose"),
                                  leading=leading, ranges=SCHED_RANGES)  # fmt: skip
        schema.check = check_scheduler
    schema.label = f"sched.name={name}"
    return schema


def check_scheduler(sched_cfg: dict[str, Any]) -> None:
    """A torch scheduler built once over a one-weight optimiser, before anything is written: its own argument
    checks are one line; ReduceLROnPlateau reads a validation metric, so it steps per epoch."""
    name = sched_cfg["name"]
    plateau = issubclass(scheduler_class(name), torch.optim.lr_scheduler.ReduceLROnPlateau)
    if plateau and sched_cfg.get("interval", "epoch") != "epoch":
        raise ConfigError(f"sched.name={name} watches a validation metric: sched.interval must be epoch")
    try:
        torch_scheduler(torch.optim.SGD(nn.Linear(1, 1).parameters(), lr=0.1), sched_cfg)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"sched.name={name} refuses its options: {str(exc).splitlines()[0]}") from None


def scheduler_class(name: str) -> type:
    """One of torch's schedulers by class name, or any scheduler by import path."""
    if "." in name:
        bases = (torch.optim.lr_scheduler.LRScheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)
        return import_class(name, bases, "sched.name")
    return torch_schedulers()[name]


def torch_scheduler(optimizer: torch.optim.Optimizer, sched_cfg: dict[str, Any]):
    options = {k: v for k, v in sched_cfg.items() if k not in SCHED_KEYS}
    return scheduler_class(sched_cfg["name"])(optimizer, **options)


def configure(module, optim_cfg, sched_cfg, total_steps: int, no_decay_modules=(),
              monitor: tuple[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    """Lightning's ``configure_optimizers`` value: the optimiser and its schedule. ``monitor``: the task's
    (metric, mode), for a ReduceLROnPlateau that names none."""
    optimizer = build_optimizer(module, optim_cfg, no_decay_modules)
    steps = max(2, int(total_steps))
    sched_cfg = dict(sched_cfg or {})
    name = sched_cfg.get("name", DEFAULT_SCHEDULE)
    if name not in SCHEDULES:  # a scheduler class, stepped as it steps: optim.warmup_fraction does not apply
        plateau = issubclass(scheduler_class(name), torch.optim.lr_scheduler.ReduceLROnPlateau)
        if plateau and monitor is not None:
            sched_cfg.setdefault("mode", monitor[1])
            sched_cfg["monitor"] = sched_cfg.get("monitor") or monitor[0]
        scheduler = {"scheduler": torch_scheduler(optimizer, sched_cfg), "name": "train/lr",
                     "interval": sched_cfg.get("interval", "epoch"),
                     "frequency": sched_cfg.get("frequency", 1)}  # fmt: skip
        if sched_cfg.get("monitor"):
            scheduler["monitor"] = sched_cfg["monitor"]
        return {"optimizer": optimizer, "lr_scheduler": scheduler}
    if name == "one_cycle":
        lr = optim_cfg["lr"]
        # One-cycle also cycles the momentum (SGD's) or beta1 (Adam's) between 0.85 and 0.95 (Smith 2018), where
        # the optimiser has one; a momentum the config sets is kept as set.
        cycles = any(k in optimizer.defaults for k in ("momentum", "betas")) and "momentum" not in optim_cfg
        schedule = torch.optim.lr_scheduler.OneCycleLR(
            optimizer, max_lr=lr, total_steps=steps, pct_start=warmup_fraction(optim_cfg, steps), cycle_momentum=cycles
        )
    else:  # a plain function: LambdaLR does not save it, so a resumed run follows its own (new) length
        warmup = round(float(optim_cfg.get("warmup_fraction", 0.0)) * steps)
        shape = SCHEDULES[name]
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: shape(step, steps, warmup))
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step", "name": "train/lr"}}


def warmup_fraction(optim_cfg, steps: int) -> float:
    """``optim.warmup_fraction``, kept where OneCycleLR can run: each phase needs a step of its own (a
    fraction under 1.5 / steps would give the warmup zero steps, and OneCycleLR divides by its length)."""
    return min(max(float(optim_cfg["warmup_fraction"]), 1.5 / steps), 1 - 0.5 / steps)
