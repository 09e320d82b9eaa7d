"""Lightning callbacks a config adds by name, on top of those every run has.

``callbacks: [early_stopping, lr_monitor]`` in a YAML, ``callbacks=[early_stopping]`` on the command line; an
entry may carry options, ``{early_stopping: {patience: 5}}``, checked against the Lightning class's signature
like any option. poslab fills what it knows of the run (the monitored metric and its direction, the learning
rate); an option set in the config wins. A preset of a class the run already has (the learning-rate monitor
every logged run carries) replaces it.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, make_dataclass
from typing import Any, Literal, Optional

from poslab.config.options import signature_schema
from poslab.config.ranges import Range
from poslab.entry_points import import_class
from poslab.errors import ConfigError, did_you_mean
from poslab.track.logger_options import check_also


@dataclass(frozen=True)
class RunFacts:
    """What a preset may take from the run."""

    monitor: str
    mode: str
    lr: float


@dataclass(frozen=True)
class Preset:
    cls: str  # the class's name in lightning.pytorch.callbacks
    supplied: Callable[[RunFacts], dict[str, Any]] = lambda run: {}
    logs: bool = False  # it writes to the run's logger (Lightning refuses it in a run without one)


PRESETS: dict[str, Preset] = {
    "early_stopping": Preset("EarlyStopping", lambda run: {"monitor": run.monitor, "mode": run.mode}),
    "lr_monitor": Preset("LearningRateMonitor", lambda run: {"logging_interval": "step"}, logs=True),
    "swa": Preset("StochasticWeightAveraging", lambda run: {"swa_lrs": run.lr}),
    "model_summary": Preset("ModelSummary"),
    "rich_model_summary": Preset("RichModelSummary"),
    "device_stats": Preset("DeviceStatsMonitor", logs=True),
}


def entries(listed: list[Any]) -> list[tuple[str, dict[str, Any]]]:
    """``(preset, options)`` per entry of ``callbacks``: a name, or a one-key mapping name -> options; any
    Callback class by import path in its place, or LightningCLI's ``{class_path: …, init_args: {…}}``."""
    out = []
    for entry in listed:
        if isinstance(entry, str):
            entry = {entry: {}}
        if isinstance(entry, Mapping) and "class_path" in entry:
            if set(entry) - {"class_path", "init_args"}:
                raise ConfigError(f"callbacks: a class_path entry holds class_path and init_args only, got {entry!r}")
            entry = {entry["class_path"]: entry.get("init_args") or {}}
        if not isinstance(entry, Mapping) or len(entry) != 1:
            raise ConfigError(f"callbacks: each entry is a preset name or {{name: {{options}}}}, got {entry!r}")
        ((name, options),) = entry.items()
        if options is not None and not isinstance(options, Mapping):
            raise ConfigError(f"callbacks: the options of {name!r} must be a mapping, got {options!r}")
        if name not in PRESETS and "." not in str(name):  # a dotted name is a class's import path
            valid = ", ".join(PRESETS)
            raise ConfigError(
                f"unknown callback preset {name!r}{did_you_mean(str(name), list(PRESETS))}; valid: {valid}"
            )
        out.append((str(name), dict(options or {})))
    return out


def check_logger(listed: list[Any], logger: Mapping[str, Any]) -> None:
    """The loggers beside the preset (``logger.also``) named right, and a preset that logs, in a run without a
    logger, one line before anything is written (Lightning would refuse it once the fit starts)."""
    check_also(logger)
    for name, _ in entries(listed):
        if name in PRESETS and PRESETS[name].logs and logger["name"] == "none" and not logger.get("also"):
            raise ConfigError(f"callbacks: {name} writes to the run's logger, and logger=none has none; use "
                              "logger=csv, tensorboard or wandb")  # fmt: skip


def lightning_class(name: str) -> type:
    """A preset's Lightning class, or the Callback class at import path ``name``."""
    from lightning.pytorch import callbacks  # only when a preset is used: Lightning takes seconds to import

    if name in PRESETS:
        return getattr(callbacks, PRESETS[name].cls)
    return import_class(name, callbacks.Callback, "callbacks")


@functools.cache
def preset_schema(name: str) -> type:
    """The options of preset ``name``: its Lightning class's constructor arguments and defaults."""
    return signature_schema(f"Callback_{name}", lightning_class(name))


def build_callbacks(listed: list[Any], run: RunFacts, existing: list) -> list:
    """``existing`` (the run's own callbacks) with the presets added; a preset of a class already there
    replaces that callback."""
    supplied = {name: preset.supplied(run) for name, preset in PRESETS.items()}
    added = [lightning_class(name)(**{**supplied.get(name, {}), **options}) for name, options in entries(listed)]
    kinds = {type(c) for c in added}
    return [c for c in existing if type(c) not in kinds] + added


#: ModelCheckpoint's arguments poslab sets for the best checkpoint: its folder and name (``best.ckpt``, the one
#: tested), ``last.ckpt`` (a callback of its own, for resume) and names that never grow a ``-v1``.
CHECKPOINT_OWNED = ("dirpath", "filename", "save_last", "enable_version_counter", "auto_insert_metric_name")


def checkpoint_schema(node: Mapping[str, Any] | None = None) -> type:
    """``checkpoint.*``: the best checkpoint's options, typed from ``ModelCheckpoint``'s signature (``save_top_k``,
    ``every_n_train_steps``, ``save_weights_only`` …); ``monitor`` and ``mode`` default to the task's. A node that
    sets nothing checks the same against no keys, so composing it does not import Lightning (seconds) for that."""
    if not node and "lightning.pytorch" not in sys.modules:
        return _UNSET_CHECKPOINT
    return _checkpoint_schema()


_UNSET_CHECKPOINT = make_dataclass("Checkpoint", [])


@functools.cache
def _checkpoint_schema() -> type:
    from lightning.pytorch.callbacks import ModelCheckpoint  # only when set: Lightning takes seconds to import

    leading = [("mode", Optional[Literal["min", "max"]], field(default=None))]  # None: the task's direction
    schema = signature_schema("Checkpoint", ModelCheckpoint, (*CHECKPOINT_OWNED, "mode"), leading=leading,
                              ranges={"save_top_k": Range(-1), "every_n_train_steps": Range(0),
                                      "every_n_epochs": Range(0)})  # fmt: skip
    schema.label = "checkpoint"
    return schema


def best_checkpoint(options: Mapping[str, Any], run: RunFacts) -> dict[str, Any]:
    """The best checkpoint's ModelCheckpoint arguments: the task's metric and direction unless ``options`` name
    others; ``best.ckpt``, or with ``save_top_k`` above 1 ``best-step<N>.ckpt`` files (the best of them tested)."""
    chosen = {k: v for k, v in options.items() if v is not None}
    monitor = chosen.pop("monitor", run.monitor)
    mode = chosen.pop("mode", run.mode if monitor == run.monitor else "min")
    name = "best" if chosen.get("save_top_k", 1) in (0, 1) else "best-step{step}"
    return {"monitor": monitor, "mode": mode, "filename": name, "auto_insert_metric_name": False, **chosen}
