"""What users of Hydra and LightningCLI type, read as poslab reads it or answered with poslab's way.

``--trainer.max_epochs=5`` and ``+key=v`` / ``++key=v`` are poslab overrides; ``--config file.yaml`` is a YAML
of overrides (a habit worth keeping: one file per setting, the command line still wins); ``ckpt_path=``,
``seed_everything=``, ``~key``, ``hydra.*``, ``-m`` and ``poslab fit`` are one line naming what poslab takes
instead (docs/configuration.md, "Coming from Hydra or LightningCLI").
"""

from __future__ import annotations

import json
from pathlib import Path

from poslab.errors import ConfigError

#: Keys of other tools and what poslab calls them.
FOREIGN_KEYS = {
    "hydra.run.dir": "run.root and run.name (a run lands in <run.root>/<modality>/<run.name>)",
    "hydra.sweep": "poslab compare (a grid of encoders x seeds) or poslab sweep (W&B)",
    "hydra.job.name": "run.name",
    "hydra": "poslab's own keys (poslab train --options)",
    "ckpt_path": "resume=<run directory> to continue a run (resume=last: the newest unfinished one), "
    "or poslab eval ckpt=<file> to test a checkpoint",
    "seed_everything": "seed=<int> (poslab seeds Python, NumPy, torch and the data loaders' workers with it)",
}
#: LightningCLI's subcommands and poslab's nearest.
FOREIGN_COMMANDS = {
    "fit": "poslab train [key=value ...]",
    "validate": "poslab eval ckpt=<file> [key=value ...] (it tests the checkpoint on the test split)",
    "test": "poslab eval ckpt=<file> [key=value ...]",
    "predict": "poslab generate ckpt=<file> prompt=... (text)",
}
#: Hydra's multirun flags, and poslab's ways of running many configs.
MULTIRUN = ("-m", "--multirun")
MULTIRUN_LINE = (
    "-m / --multirun is Hydra's sweep; poslab runs a grid with `poslab compare [modality=M] [experiment=X] "
    "[encoders=[a,b]] [seeds=N]` (one report), or a W&B sweep with `poslab sweep`"
)


def lightning_cli_form(arg: str) -> str:
    """LightningCLI's ``--trainer.max_epochs=5`` is ``trainer.max_epochs=5`` (a dotted key with ``=`` only)."""
    if arg.startswith("--") and "=" in arg and "." in arg.split("=", 1)[0]:
        return arg[2:]
    return arg


def override_form(item: str) -> str:
    """Hydra's override prefixes, where they mean something here: ``+key=v`` / ``++key=v`` (add / force-add)
    set a declared key like ``key=v``; ``~key`` (delete), ``hydra.*`` and LightningCLI's keys are one line
    saying what to use."""
    if item.startswith("~"):
        key = item[1:].split("=", 1)[0]
        raise ConfigError(
            f"'{item}': every key is declared and cannot be removed; set {key}=VALUE (defaults: poslab train --options)"
        )
    item = item.removeprefix("++").removeprefix("+")
    key = item.split("=", 1)[0].strip()
    for foreign, ours in FOREIGN_KEYS.items():
        if key == foreign or key.startswith(f"{foreign}."):
            tool = "a Hydra" if foreign.startswith("hydra") else "LightningCLI's"
            raise ConfigError(f"'{key}' is {tool} key; poslab's equivalent: {ours}")
    return item


def foreign_command(command: str) -> None:
    """LightningCLI's ``fit`` / ``validate`` / ``test`` / ``predict``: one line naming poslab's nearest."""
    if command in FOREIGN_COMMANDS:
        raise ConfigError(f"'poslab {command}' is LightningCLI's; poslab's nearest: {FOREIGN_COMMANDS[command]}")


def with_config_files(argv: list[str]) -> list[str]:
    """``--config FILE`` (or ``--config=FILE``, ``-c FILE``) replaced by the file's overrides, in place: later
    arguments win over the file, as they win over each other."""
    out, items = [], iter(argv)
    for arg in items:
        if arg in ("--config", "-c") or arg.startswith("--config="):
            path = arg.split("=", 1)[1] if "=" in arg else next(items, None)
            if not path:
                raise ConfigError("--config needs a YAML file of overrides: --config FILE")
            out += file_overrides(Path(path))
        else:
            out.append(arg)
    return out


def file_overrides(path: Path) -> list[str]:
    """A YAML file as ``key=value`` overrides: nested mappings become dotted keys; a mapping with ``name``
    under a config group (``encoder: {name: rope, base: 500}``, as ``--print-config`` writes it) selects the
    group first. Values keep their YAML types."""
    from omegaconf import OmegaConf  # deferred: OmegaConf, 0.1 s of `poslab --help`'s 0.13 s

    from poslab.config.files import group_choices  # deferred: OmegaConf, 0.1 s of `poslab --help`'s 0.13 s

    try:
        loaded = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    except FileNotFoundError:
        raise ConfigError(f"--config {path}: no such file") from None
    except Exception as exc:  # YAML that does not parse
        raise ConfigError(f"--config {path}: not a YAML mapping of overrides ({str(exc).splitlines()[0]})") from None
    if not isinstance(loaded, dict):
        raise ConfigError(f"--config {path}: not a YAML mapping of overrides (key: value lines)")

    def flat(node: dict, prefix: str) -> list[str]:
        items = []
        if prefix and node.get("name") in group_choices(prefix.rstrip(".")):
            items.append(f"{prefix.rstrip('.')}={node['name']}")  # the group first, then its keys over it
            node = {k: v for k, v in node.items() if k != "name"}
        for key, value in node.items():
            if isinstance(value, dict) and value:
                items += flat(value, f"{prefix}{key}.")
            else:
                items.append(f"{prefix}{key}={json.dumps(value) if not isinstance(value, str) else value}")
        return items

    return flat(loaded, "")
