"""``poslab sweep [modality=M] [experiment=X] [encoders=[a,b]] [seeds=N]``: a W&B grid sweep, printed as YAML.

The grid is what ``poslab compare`` would run — the experiment's
``compare_encoders`` or every registered encoder that fits the modality, times
``compare_seeds`` — so a new encoder joins the sweeps with no edit. The
metric is the best score of the metric the task picks its best checkpoint by (``val/acc_best``); each agent
call runs ``python -m poslab train key=value …`` with the agent's ``python`` (values typed as the config types
them), into the logger's project (and entity), and the trial's run is the agent's (its id in ``run.json``).
"""

from __future__ import annotations

import secrets
import sys
import time
from typing import Any

from poslab import __name__ as package
from poslab.errors import ConfigError, PoslabError
from poslab.study.arguments import grid_help, parse_grid_arguments
from poslab.tasks import task_class


def sweep_config(modality: str, encoders: list[str] | None = None, seeds: int | None = None,
                 overrides: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:  # fmt: skip
    """The W&B sweep for the grid ``poslab compare`` would run with the same arguments."""
    return sweep_and_left_out(modality, encoders, seeds, overrides)[0]


def sweep_and_left_out(modality: str, encoders: list[str] | None = None, seeds: int | None = None,
                       overrides: list[str] | tuple[str, ...] = (),
                       sweep_id: str = "") -> tuple[dict[str, Any], list[str]]:  # fmt: skip
    """The sweep, and the encoders' own variants (``mrope/interleaved``) it leaves out: a grid sweep sets one
    value per parameter, and an own variant is its encoder with other options. Its trials are tagged
    ``compare:<sweep_id>`` (default: a new id), so ``poslab dashboard <sweep_id>`` finds them as a comparison's."""
    sweep_id = sweep_id or new_sweep_id()
    from poslab.study.compare import plan  # deferred: torch (the encoders), ~2.4 s

    grid = plan(modality, encoders, seeds, list(overrides))
    cfg = grid[0][2]
    plain = {label for label, _, c in grid if not c.variant}  # an own variant runs beside its encoder's plain run
    own = list(dict.fromkeys(label for label, _, c in grid if c.variant and label.split("/")[0] in plain))
    if any(c.variant for label, _, c in grid if label not in own):
        raise ConfigError(
            f"experiment '{cfg.experiment}' compares variants (compare_variants): a sweep runs one setting per "
            "encoder; sweep each variant's overrides separately (key=value arguments)"
        )
    grid = [run for run in grid if run[0] not in own]
    metric, mode = task_class(cfg.modality, cfg.task.name).monitor
    parameters: dict[str, Any] = {"modality": {"value": modality}}
    if cfg.experiment:
        parameters["experiment"] = {"value": cfg.experiment}
    for item in overrides:
        key, _, value = item.partition("=")
        if key not in ("experiment", "logger.tags"):
            parameters[key] = {"value": typed(cfg, key, value)}
    parameters["logger.tags"] = {"value": [*cfg.logger.tags, f"compare:{sweep_id}"]}
    parameters["encoder"] = {"values": list(dict.fromkeys(c.encoder.name for _, _, c in grid))}
    parameters["seed"] = {"values": sorted({seed for _, seed, _ in grid})}
    config = {"project": cfg.logger.project}
    if cfg.logger.entity:
        config["entity"] = cfg.logger.entity
    sweep = {
        **config,
        "program": package,  # the agent reads it even when the command does not use ${program}
        "method": "grid",
        # the best checkpoint's score: a plain number in every run's W&B summary (the monitored metric's own
        # summary holds {best, last}, which a sweep cannot rank)
        "metric": {"name": f"{metric}_best", "goal": "maximize" if mode == "max" else "minimize"},
        "parameters": parameters,
        # the agent's own `python` (on its PATH: activate the environment poslab is installed in first), not
        # this machine's interpreter path: the agent may run on another node
        "command": ["${env}", "${interpreter}", "-m", package, "train", "${args_no_hyphens}"],
    }
    return sweep, own


def new_sweep_id() -> str:
    """``sweep-<date>-<time>-<4 hex>``: the tag of one sweep's trials."""
    return f"sweep-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def typed(cfg, key: str, given: str) -> Any:
    """An override's value as the config types it (``trainer.max_steps=100`` -> 100), when the agent's
    ``key=<value>`` of it reads back the same; else the string as given."""
    from omegaconf import OmegaConf  # deferred: OmegaConf, 0.1 s of `poslab --help`'s 0.13 s

    value = OmegaConf.select(cfg, key, default=given)
    value = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
    try:
        back = OmegaConf.to_container(OmegaConf.from_dotlist([f"_={value}"]))["_"]
    except Exception:  # a form the agent's str() cannot carry
        return given
    return value if back == value and type(back) is type(value) else given


SWEEP_WHAT = (
    "Print the W&B grid sweep of what `poslab compare` would run with the same arguments, as YAML: "
    "`poslab sweep experiment=needle > sweep.yaml; wandb sweep sweep.yaml; wandb agent <id>`."
)


def main(argv: list[str] | None = None) -> int:
    from omegaconf import OmegaConf  # deferred: OmegaConf, 0.1 s of `poslab --help`'s 0.13 s

    argv = list(argv or [])
    if {"-h", "--help"} & set(argv):
        print(grid_help("poslab sweep", SWEEP_WHAT))
        return 0
    try:
        grid = parse_grid_arguments(argv, "poslab sweep")
        sweep_id = new_sweep_id()
        config, left_out = sweep_and_left_out(grid.modality, grid.encoders, grid.seeds, grid.overrides, sweep_id)
    except PoslabError as exc:
        print(f"poslab sweep: error: {exc}", file=sys.stderr)
        return 2
    if left_out:
        note = "one setting per encoder; sweep each with its compare_variants overrides as key=value arguments"
        print(f"poslab sweep: the encoders' own variants {', '.join(left_out)} are left out ({note})", file=sys.stderr)
    print(f"poslab sweep: its trials are tagged compare:{sweep_id}; `poslab dashboard {sweep_id}` builds their "
          "workspace (online)", file=sys.stderr)  # fmt: skip
    print(OmegaConf.to_yaml(OmegaConf.create(config)), end="")
    return 0
