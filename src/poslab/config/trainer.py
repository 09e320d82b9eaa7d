"""``trainer.*``: every ``lightning.Trainer`` argument a YAML value can hold, typed from its signature.

Reading the signature imports Lightning, which would more than double the time of every command that only
composes a config (``--print-config``: 4.4 s against 1.9 s on the 2-core CPU). So the derived table is
generated into :mod:`poslab.config.trainer_arguments` for the Lightning version installed when it was made, and
read from there; under another Lightning version the signature is read live. Regenerate after upgrading
Lightning with ``python -m poslab.config.trainer`` (a test fails while the table is stale).
"""

from __future__ import annotations

import functools
import typing
from dataclasses import field, make_dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Union

from omegaconf import MISSING

from poslab.config import trainer_arguments
from poslab.config.options import SCALARS, config_type, keyword_options, literal_choices, plain_default
from poslab.config.ranges import AT_LEAST_0, AT_LEAST_1, POSITIVE, Range, with_ranges
from poslab.errors import ConfigError

#: ``lightning.Trainer`` arguments poslab builds itself, and where a run configures them instead.
TRAINER_OWNED = {
    "logger": "logger=NAME (wandb, csv, tensorboard, none) and the logger.* keys",
    "callbacks": "the top-level callbacks list, e.g. callbacks=[early_stopping,lr_monitor]",
    "plugins": "poslab: its checkpoint IO writes a SHA-256 beside each checkpoint; precision is trainer.precision, "
    "and Lightning detects the cluster environment (SLURM, torchrun)",
    "default_root_dir": "run.root and run.name",
    "enable_checkpointing": "poslab: best.ckpt and last.ckpt are always written (run.checkpoint_every_n_steps)",
}
#: Where poslab's default differs from Lightning's (``build_trainer`` passes these unless a config sets them).
TRAINER_DEFAULTS = {"enable_model_summary": False}  # a run prints its own one-line summary (num_params)

#: Ranges of the arguments (Lightning's signature carries none); -1 is Lightning's "no limit".
RANGES = {
    "num_nodes": AT_LEAST_1,
    "max_epochs": Range(1, also=(-1,)),  # 0 would test an untrained model
    "max_steps": Range(1, also=(-1,)),
    "min_epochs": AT_LEAST_0,
    "min_steps": AT_LEAST_0,
    "limit_train_batches": POSITIVE,
    "limit_val_batches": AT_LEAST_0,
    "limit_test_batches": POSITIVE,
    "limit_predict_batches": AT_LEAST_0,
    "overfit_batches": AT_LEAST_0,
    "check_val_every_n_epoch": AT_LEAST_1,
    "val_check_interval": POSITIVE,
    "log_every_n_steps": AT_LEAST_1,
    "gradient_clip_val": AT_LEAST_0,
    "num_sanity_val_steps": Range(-1),
    "accumulate_grad_batches": AT_LEAST_1,
    "fast_dev_run": AT_LEAST_0,  # true or a number of batches
    "reload_dataloaders_every_n_epochs": AT_LEAST_0,
}

TABLE = Path(__file__).with_name("trainer_arguments.py")


def live_arguments() -> list[tuple[str, Any, Any, tuple | None]]:
    """``(key, config type, Lightning's default, listed choices)`` per argument, from the signature."""
    import lightning as L

    hints = typing.get_type_hints(L.Trainer.__init__)
    rows = []
    for key, param in keyword_options(L.Trainer).items():
        held = config_type(hints.get(key, Any))
        if key not in TRAINER_OWNED and held is not None:
            rows.append((key, held, plain_default(param.default), literal_choices(hints.get(key, Any))))
    return rows


def arguments() -> list[tuple[str, Any, Any, tuple | None]]:
    """The generated table when it was made for the installed Lightning, else the live signature."""

    if trainer_arguments.LIGHTNING == metadata.version("lightning"):
        return list(trainer_arguments.ARGUMENTS)
    return live_arguments()


@functools.cache
def trainer_schema() -> type:
    """The ``trainer`` node's schema: ``name`` (the preset) and every argument, with Lightning's defaults
    (poslab's where :data:`TRAINER_DEFAULTS` has one). Objects take their string forms (``profiler=simple``,
    ``strategy=ddp``); a config holds the keys it sets, the others stay Lightning's. ``owned`` and
    ``choices`` ride along for validation."""
    fields_: list = [("name", str, field(default=MISSING))]
    choices = {}
    for key, held, default, listed in arguments():
        fields_.append((key, with_ranges(held, key, RANGES), field(default=TRAINER_DEFAULTS.get(key, default))))
        if listed:
            choices[key] = listed
    schema = make_dataclass("TrainerConfig", fields_)
    schema.owned, schema.choices, schema.check = TRAINER_OWNED, choices, check_limits
    return schema


def check_limits(node: dict[str, Any]) -> None:
    """A lower limit above its upper one (``min_epochs=5 max_epochs=2``) is one line: Lightning would stop at
    the upper one without a word. -1 / null is "no limit"."""
    for unit in ("epochs", "steps"):
        low, high = node.get(f"min_{unit}"), node.get(f"max_{unit}")
        if low is not None and high is not None and high != -1 and low > high:
            raise ConfigError(f"trainer.min_{unit} ({low}) must not exceed trainer.max_{unit} ({high})")


def type_source(annotation: Any) -> str:
    """A config type as the source that builds it (``Optional[Union[int, str]]``)."""
    if annotation is Any:
        return "Any"
    if annotation in SCALARS:
        return annotation.__name__
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Union:
        rest = [a for a in args if a is not type(None)]
        inner = type_source(rest[0]) if len(rest) == 1 else f"Union[{', '.join(type_source(a) for a in rest)}]"
        return f"Optional[{inner}]" if len(rest) < len(args) else inner
    return f"{origin.__name__}[{', '.join('...' if a is Ellipsis else type_source(a) for a in args)}]"


def table_source() -> str:
    """The text of :mod:`poslab.config.trainer_arguments` for the installed Lightning."""
    rows = "\n".join(
        f"    ({key!r}, {type_source(held)}, {default!r}, {listed!r}),"
        for key, held, default, listed in live_arguments()
    )
    return (
        '"""``lightning.Trainer``\'s arguments as config keys, generated from its signature by\n'
        '``python -m poslab.config.trainer``: do not edit."""\n\n'
        "from typing import Any, Optional, Union  # noqa: F401\n\n"
        f'LIGHTNING = "{metadata.version("lightning")}"\n'
        "#: (key, config type, Lightning's default, the values it lists or None)\n"
        f"ARGUMENTS = (\n{rows}\n)\n"
    )


if __name__ == "__main__":
    import shutil
    import subprocess

    TABLE.write_text(table_source())
    if shutil.which("ruff"):  # laid out as `make lint` expects
        subprocess.run(["ruff", "format", "-q", str(TABLE)], check=False)
    print(f"wrote {TABLE}")
