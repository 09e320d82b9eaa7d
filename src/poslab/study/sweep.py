"""``poslab sweep [modality=M] [experiment=X] [encoders=[a,b]] [seeds=N]``: a W&B grid sweep, printed as YAML.

The grid is what ``poslab compare`` would run — the experiment's
``compare_encoders`` or every registered encoder that fits the modality, times
``compare_seeds`` — so a new encoder joins the sweeps with no edit. The
metric is the best score of the metric the task picks its best checkpoint by (``val/acc_best``); each agent
call runs ``<this interpreter> -m poslab train key=value …``, into the logger's project (and entity).
"""

from __future__ import annotations

import sys
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
                       overrides: list[str] | tuple[str, ...] = ()) -> tuple[dict[str, Any], list[str]]:  # fmt: skip
    """The sweep, and the encoders' own variants (``mrope/interleaved``) it leaves out: a grid sweep sets one
    value per parameter, and an own variant is its encoder with other options."""
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
        if key != "experiment":
            parameters[key] = {"value": value}
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
        # this interpreter's own path: the agent runs poslab from its venv without activating it
        "command": [sys.executable, "-m", package, "train", "${args_no_hyphens}"],
    }
    return sweep, own


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
        config, left_out = sweep_and_left_out(grid.modality, grid.encoders, grid.seeds, grid.overrides)
    except PoslabError as exc:
        print(f"poslab sweep: error: {exc}", file=sys.stderr)
        return 2
    if left_out:
        note = "one setting per encoder; sweep each with its compare_variants overrides as key=value arguments"
        print(f"poslab sweep: the encoders' own variants {', '.join(left_out)} are left out ({note})", file=sys.stderr)
    print(OmegaConf.to_yaml(OmegaConf.create(config)), end="")
    return 0
