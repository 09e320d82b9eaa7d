"""``logger.*``: the logger preset (``configs/logger/``), the loggers beside it, and each one's options —
declared here, apart from the loggers themselves, so that composing a config imports none of them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Optional

from poslab.config.checks import check_block, config_key
from poslab.config.options import signature_schema
from poslab.config.ranges import AT_LEAST_1
from poslab.config.schema import MISSING
from poslab.entry_points import import_class
from poslab.errors import ConfigError

#: The loggers that may run beside the preset's (``logger=[wandb,csv]``: W&B, and a CSV file too).
FILE_LOGGERS = ("csv", "tensorboard")


@dataclass
class CsvOptions:
    """Lightning's ``CSVLogger`` under ``<run>/csv/``."""

    flush_logs_every_n_steps: Annotated[int, AT_LEAST_1] = 100  # rows written to metrics.csv every this many logs


@dataclass
class TensorBoardOptions:
    """Lightning's ``TensorBoardLogger`` under ``<run>/tensorboard/``."""

    log_graph: bool = False  # the model's graph, traced once at the start
    max_queue: Annotated[int, AT_LEAST_1] = 10  # events held before they are written
    flush_secs: Annotated[int, AT_LEAST_1] = 120  # seconds between writes


@dataclass
class LoggerConfig:
    """``name`` is the preset (``configs/logger/``); ``also``: file loggers beside it; the W&B keys are its own
    (csv and tensorboard ignore them), ``csv.*`` and ``tensorboard.*`` theirs."""

    name: Literal["wandb", "csv", "tensorboard", "none"] = MISSING
    also: list[Any] = field(default_factory=list)  # csv, tensorboard or {class_path, init_args} beside name's
    mode: Literal["auto", "online", "offline", "disabled"] = "auto"  # auto: online with W&B credentials, else offline
    project: str = "poslab"
    entity: Optional[str] = None
    group: Optional[str] = None  # None: <modality>-<task>[-<experiment>]-<encoder>[-<variant>]-<setting>
    tags: list[str] = field(default_factory=list)
    notes: Optional[str] = None
    log_model: bool = False  # checkpoints as W&B artifacts (offline: kept in the run, uploaded by `wandb sync`)
    csv: CsvOptions = field(default_factory=CsvOptions)
    tensorboard: TensorBoardOptions = field(default_factory=TensorBoardOptions)


def check_also(logger: dict) -> None:
    """``logger.also`` names file loggers, each once, none the preset's own; any Lightning ``Logger`` by import
    path as ``{class_path, init_args}`` (its arguments typed from its signature, in place)."""
    also = list(logger.get("also") or [])
    logger["also"] = also = [typed_logger(e) if isinstance(e, Mapping) else e for e in also]
    unknown = [n for n in also if not isinstance(n, Mapping) and n not in FILE_LOGGERS]
    named = [n for n in also if not isinstance(n, Mapping)]
    if unknown or len(set(named)) != len(named) or logger.get("name") in named:
        raise ConfigError(
            f"logger.also={also}: the loggers beside logger.name={logger.get('name')} are "
            f"{' and/or '.join(FILE_LOGGERS)}, each once and not the preset itself (logger=[wandb,csv]), or "
            "{class_path: <a Lightning Logger>, init_args: {...}}"
        )


def typed_logger(entry: Mapping[str, Any]) -> dict[str, Any]:
    """``{class_path, init_args}`` of a Lightning Logger: the class imported, its arguments checked and typed
    against its signature (``save_dir`` is poslab's: the run directory)."""
    from lightning.pytorch.loggers import Logger  # deferred: Lightning, ~7 s: only when a logger class is named

    if set(entry) - {"class_path", "init_args"} or "class_path" not in entry:
        raise ConfigError(f"logger.also: a logger class entry holds class_path and init_args, got {dict(entry)!r}")
    path = str(entry["class_path"])
    schema = signature_schema(f"Logger_{path}", import_class(path, Logger, "logger.also"), skip=("save_dir",))
    init_args = check_block(dict(entry.get("init_args") or {}), schema, f"logger.also.{path}.", config_key, sparse=True)
    return {"class_path": path, "init_args": init_args}
