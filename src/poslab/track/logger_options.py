"""``logger.*``: the logger preset (``configs/logger/``), the loggers beside it, and each one's options —
declared here, apart from the loggers themselves, so that composing a config imports none of them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal, Optional

from poslab.config.ranges import AT_LEAST_1
from poslab.config.schema import MISSING
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
    also: list[str] = field(default_factory=list)  # csv and / or tensorboard beside name's (logger=[wandb,csv])
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
    """``logger.also`` names file loggers, each once, none the preset's own."""
    also = list(logger.get("also") or [])
    unknown = [n for n in also if n not in FILE_LOGGERS]
    if unknown or len(set(also)) != len(also) or logger.get("name") in also:
        raise ConfigError(
            f"logger.also={also}: the loggers beside logger.name={logger.get('name')} are "
            f"{' and/or '.join(FILE_LOGGERS)}, each once and not the preset itself (logger=[wandb,csv])"
        )
