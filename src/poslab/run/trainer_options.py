"""``trainer.*``: every ``lightning.Trainer`` argument a YAML value can hold, typed from its signature.

Reading the signature imports Lightning, which would more than double the time of every command that only
composes a config (``--print-config``: 4.4 s against 1.9 s on the 2-core CPU). So the derived table is
generated into :mod:`poslab.run.trainer_arguments` for the Lightning version installed when it was made, and
read from there; under another Lightning version the signature is read live. Regenerate after upgrading
Lightning with ``python -m poslab.run.trainer_options`` (a test fails while the table is stale).
"""

from __future__ import annotations

import functools
import inspect
import typing
from dataclasses import field
from importlib import metadata
from pathlib import Path
from typing import Any, Literal, Union

from omegaconf import MISSING

from poslab.config.options import config_type, keyword_options, plain_default, signature_schema
from poslab.config.ranges import AT_LEAST_0, AT_LEAST_1, POSITIVE, Range
from poslab.errors import ConfigError
from poslab.run import trainer_arguments

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


def live_arguments() -> list[tuple[str, Any, Any]]:
    """``(key, config type, Lightning's default)`` of every argument a YAML value can hold, from the signature."""
    import lightning as L  # deferred: Lightning, ~7 s

    hints = typing.get_type_hints(L.Trainer.__init__)
    rows = [
        (k, config_type(hints.get(k, Any)), plain_default(p.default)) for k, p in keyword_options(L.Trainer).items()
    ]
    return [row for row in rows if row[0] not in TRAINER_OWNED and row[1] is not None]


def arguments() -> list[tuple[str, Any, Any]]:
    """The generated table when it was made for the installed Lightning, else the live signature."""
    if trainer_arguments.LIGHTNING == metadata.version("lightning"):
        return list(trainer_arguments.ARGUMENTS)
    return live_arguments()


@functools.cache
def trainer_schema() -> type:
    """The ``trainer`` node's schema, built as every signature's is (:func:`signature_schema`) from a stand-in
    with the table's arguments: ``name`` (the preset), then every argument with Lightning's default (poslab's
    where :data:`TRAINER_DEFAULTS` has one) and its range. Objects take their string forms (``profiler=simple``,
    ``strategy=ddp``); ``owned`` (the keys poslab sets) and ``check`` ride along for validation."""
    rows = arguments()

    def lightning_trainer(**arguments: Any) -> None: ...

    kind = inspect.Parameter.KEYWORD_ONLY
    lightning_trainer.__signature__ = inspect.Signature([inspect.Parameter(k, kind, default=d) for k, _, d in rows])
    lightning_trainer.__annotations__ = {k: held for k, held, _ in rows}
    leading = [("name", str, field(default=MISSING))]
    schema = signature_schema("TrainerConfig", lightning_trainer, leading=leading, defaults=TRAINER_DEFAULTS,
                              ranges=RANGES)  # fmt: skip
    schema.owned, schema.check = TRAINER_OWNED, check_limits
    return schema


def check_limits(node: dict[str, Any]) -> None:
    """A lower limit above its upper one (``min_epochs=5 max_epochs=2``) is one line: Lightning would stop at
    the upper one without a word. -1 / null is "no limit"."""
    for unit in ("epochs", "steps"):
        low, high = node.get(f"min_{unit}"), node.get(f"max_{unit}")
        if low is not None and high is not None and high != -1 and low > high:
            raise ConfigError(f"trainer.min_{unit} ({low}) must not exceed trainer.max_{unit} ({high})")


def type_source(annotation: Any) -> str:
    """A config type as the source that builds it (``Union[int, str, None]``, ``Literal[16, 'bf16']``)."""
    if annotation in (Any, type(None)):
        return "Any" if annotation is Any else "None"
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is None:
        return annotation.__name__
    if origin is Literal:
        return f"Literal[{', '.join(map(repr, args))}]"
    name = "Union" if origin is Union else origin.__name__
    return f"{name}[{', '.join('...' if a is Ellipsis else type_source(a) for a in args)}]"


def table_source() -> str:
    """The text of :mod:`poslab.run.trainer_arguments` for the installed Lightning."""
    rows = "\n".join(f"    ({key!r}, {type_source(held)}, {default!r})," for key, held, default in live_arguments())
    return (
        '"""``lightning.Trainer``\'s arguments as config keys, generated from its signature by\n'
        '``python -m poslab.run.trainer_options``: do not edit."""\n\n'
        "# ruff: noqa: E501\n"
        "from typing import Any, Literal, Union  # noqa: F401\n\n"
        f'LIGHTNING = "{metadata.version("lightning")}"\n'
        "#: (key, config type, Lightning's default)\n"
        f"# fmt: off\nARGUMENTS = (\n{rows}\n)\n# fmt: on\n"
    )


if __name__ == "__main__":
    TABLE.write_text(table_source())
    print(f"wrote {TABLE}")
