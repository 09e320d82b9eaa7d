"""The arguments ``poslab compare`` and ``poslab sweep`` share: ``modality=``, ``encoders=``, ``seeds=`` (in
their YAML form), taken apart from the config overrides, and the modality an ``experiment=`` names, so that
``experiment=<name>`` alone is a whole grid."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field

from poslab.errors import PoslabError, first_line

#: The grid's own keys, as ``--help`` lists them (the rest are config overrides, as ``poslab train`` takes).
GRID_KEYS = {
    "modality": "the modality (default: the one the experiment's defaults name)",
    "experiment": "an experiment of configs/experiment/: its encoders, seeds, variants and expectations",
    "encoders": "the encoders, e.g. encoders=[alibi,rope] (default: the experiment's, else every one that fits)",
    "seeds": "seeds per encoder (default: the experiment's compare_seeds, else 3)",
}


@dataclass
class GridArguments:
    modality: str
    encoders: list[str] | None = None
    seeds: int | None = None
    overrides: list[str] = field(default_factory=list)  # config overrides, experiment= among them
    extra: dict = field(default_factory=dict)  # a command's own keys (compare's workers=, worker=)


def parse_grid_arguments(argv: list[str], command: str, own: tuple[str, ...] = ()) -> GridArguments:
    """``argv`` taken apart; ``own``: the command's further keys, kept in ``extra`` (``worker`` as a string)."""
    from omegaconf import OmegaConf  # deferred: OmegaConf, 0.1 s of `poslab --help`'s 0.13 s

    special, overrides = {}, []
    for item in argv:
        key, _, value = item.partition("=")
        if key in ("modality", "encoders", "seeds", *own):
            try:
                special[key] = (
                    value if key == "worker" else OmegaConf.to_container(OmegaConf.from_dotlist([f"_={value}"]))["_"]
                )
            except Exception as exc:  # noqa: BLE001  (OmegaConf's and YAML's errors, a 10,000-node list's too)
                raise PoslabError(f"cannot parse the value of '{key}': {first_line(exc)}") from None
        else:
            overrides.append(item)
    encoders = special.pop("encoders", None)
    seeds = special.pop("seeds", None)
    modality = special.pop("modality", None) or experiment_modality(overrides, command)
    return GridArguments(
        str(modality),
        [encoders] if isinstance(encoders, str) else encoders,
        int(seeds) if seeds is not None else None,  # None: the experiment's compare_seeds
        overrides,
        special,
    )


def experiment_modality(overrides: list[str], command: str = "poslab compare") -> str:
    """The modality an ``experiment=`` names in its defaults (a grid needs no ``modality=`` beside it)."""
    from poslab.config.composition import load_group  # deferred: torch (composing reads the encoders), ~2.6 s

    names = [item.partition("=")[2] for item in overrides if item.startswith("experiment=")]
    modality = (load_group("experiment", names[-1]).get("defaults") or {}).get("modality") if names else None
    if not modality:
        raise PoslabError(f"{command} needs modality=<name> (or an experiment= whose defaults name one)")
    return str(modality)


def grid_help(command: str, what: str, own: dict[str, str] | None = None) -> str:
    """``--help`` of a grid command: what it does, its keys, and where the config overrides are listed."""
    keys = {**GRID_KEYS, **(own or {})}
    width = max(map(len, keys)) + 1
    lines = [f"usage: {command} [modality=M] [experiment=X] [encoders=[a,b]] [seeds=N] [key=value ...]", "",
             textwrap.fill(what, 100), "", "keys:"]  # fmt: skip
    lines += [f"  {f'{key}=':<{width}} {text}" for key, text in keys.items()]
    lines += ["  key=value   any config override, as `poslab train` takes (`poslab train --options` lists them)"]
    return "\n".join(lines)
