"""``poslab train resume=<run dir>|last``: continue a killed or interrupted run.

A run directory holds what continuing needs: ``config.yaml`` (the resolved
config, written when the run starts), ``run.json`` (its W&B run id) and
``checkpoints/last.ckpt`` (written every ``run.checkpoint_every_n_steps`` and on
SIGTERM). The resumed run trains into the same directory and the same W&B run,
from the checkpoint's step, and — with the same seed, on the CPU — ends with the
metrics an uninterrupted run would have.

A requeued SLURM job or a restarted torchrun launch finds its own run unfinished and continues it the same way
(:func:`resumable_launch_run`, :func:`relaunched_config`); every decision about continuing a run is made here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from poslab.config.composition import compose, recompose, to_dict
from poslab.errors import ConfigError, DataError, first_line
from poslab.files import write_json_atomic, write_text_atomic
from poslab.run import cluster
from poslab.run.policy import changeable_on_resume, rule
from poslab.run.rundir import resume_command

CONFIG_FILE = "config.yaml"
RECORD_FILE = "run.json"
LAST_CHECKPOINT = Path("checkpoints") / "last.ckpt"
#: What a finished fit logged last (:class:`poslab.run.callbacks.FitMetrics`): a run resumed after its fit reads it.
FIT_RECORD = Path("checkpoints") / "fit.json"
#: Differing keys named in the error, at most (one line stays readable).
SHOWN = 8
#: Group selections that name what a run is, and the key holding that name in its config.
IDENTITY = {"modality": "modality", "encoder": "encoder.name", "experiment": "experiment"}


def command_config(overrides: list[str] | tuple[str, ...]) -> DictConfig:
    """The config ``poslab train key=value …`` runs: composed from the overrides, or, with ``resume=``, the
    stored config of the run it names with the overrides a resumed run may change."""
    cfg = compose(overrides)
    return resumed_config(cfg, overrides) if cfg.resume else cfg


def find_run(cfg: DictConfig) -> Path:
    """The run directory ``cfg.resume`` names; ``last`` = the newest unfinished run of ``cfg.modality``."""
    target = str(cfg.resume)
    if target == "last":
        root = Path(cfg.run.root) / cfg.modality
        candidates = [
            d for d in root.glob("*") if (d / LAST_CHECKPOINT).is_file() and not (d / "summary.json").exists()
        ]
        if not candidates:
            raise ConfigError(f"resume=last: no unfinished {cfg.modality} run with a checkpoint under {root}")
        return max(candidates, key=lambda d: (d / LAST_CHECKPOINT).stat().st_mtime).resolve()
    run_dir = Path(target).expanduser().resolve()
    if not run_dir.is_dir():
        raise ConfigError(f"resume={target}: no such run directory")
    if (run_dir / "summary.json").exists():
        raise ConfigError(f"resume={target}: that run already finished (it has a summary.json)")
    if not (run_dir / LAST_CHECKPOINT).is_file():
        raise ConfigError(f"resume={target}: the run directory has no {LAST_CHECKPOINT} to continue from")
    if not (run_dir / CONFIG_FILE).is_file():
        raise ConfigError(f"resume={target}: the run directory has no {CONFIG_FILE} (not a poslab run?)")
    return run_dir


def resumed_config(cfg: DictConfig, overrides: list[str] | tuple[str, ...]) -> DictConfig:
    """The stored config of the run ``cfg.resume`` names, with ``overrides`` applied and checked.

    Only keys :mod:`poslab.run.policy` lets a resumed run change may differ from the stored run; anything else
    is one error line listing the keys.
    """

    run_dir = find_run(cfg)
    stored = stored_config(run_dir, cfg.resume)
    stored_cfg = OmegaConf.create(stored)
    rest, changed = [], []
    for item in overrides:
        key, _, value = item.partition("=")
        if key == "resume":
            continue
        if key in IDENTITY:  # a selection that names what the run is: fine when it names the same
            now = OmegaConf.select(stored_cfg, IDENTITY[key])
            if value != str(now):
                changed.append((IDENTITY[key], now, value))
            continue
        rest.append(item)
    try:
        new = recompose(stored, rest, evaluating=False)
    except ConfigError as exc:
        raise ConfigError(f"resume={cfg.resume}: {CONFIG_FILE} does not make a valid config: {exc}") from None
    changed += [
        (k, OmegaConf.select(stored_cfg, k), OmegaConf.select(new, k))
        for k in differing_keys(stored, to_dict(new))
        if not rule(k).resume
    ]
    if changed:
        shown = ", ".join(f"{k} ({old!r} -> {now!r})" for k, old, now in changed[:SHOWN])
        more = f" and {len(changed) - SHOWN} more" if len(changed) > SHOWN else ""
        raise ConfigError(
            f"resume={cfg.resume}: the config differs from the run's in {shown}{more}; "
            f"a resumed run may change only {changeable_on_resume()}"
        )
    new.resume = str(run_dir)
    new.run.name = run_dir.name
    new.run.root = str(run_dir.parent.parent)
    return new


def stored_config(run_dir: Path, target: Any) -> dict[str, Any]:
    """The run's ``config.yaml`` as a dict; unreadable or not a poslab config is one line."""

    try:
        stored = OmegaConf.to_container(OmegaConf.load(run_dir / CONFIG_FILE), resolve=True)
    except Exception as exc:  # YAML syntax, interpolation, a binary file
        raise ConfigError(f"resume={target}: {run_dir / CONFIG_FILE} is unreadable ({first_line(exc)})") from None
    if not isinstance(stored, dict) or not all(isinstance(stored.get(k), dict) for k in ("encoder", "run", "logger")):
        raise ConfigError(f"resume={target}: {run_dir / CONFIG_FILE} is not a poslab run's config")
    return stored


def differing_keys(a: Any, b: Any, prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two nested dicts."""
    if isinstance(a, dict) and isinstance(b, dict):
        keys = sorted(set(a) | set(b))
        return [k for key in keys for k in differing_keys(a.get(key), b.get(key), f"{prefix}{key}.")]
    return [] if a == b else [prefix.rstrip(".")]


def write_record(run_dir: Path, cfg: DictConfig, wandb_id: str) -> None:
    """``config.yaml`` and ``run.json``: what a later ``resume=`` reads."""

    write_text_atomic(run_dir / CONFIG_FILE, OmegaConf.to_yaml(cfg))
    write_json_atomic(run_dir / RECORD_FILE, {"wandb_id": wandb_id})


def read_record(run_dir: Path) -> dict[str, Any]:
    """``run.json``; one that cannot be read is one line saying how to go on without it."""

    path = run_dir / RECORD_FILE
    if not path.exists():
        return {}
    try:
        record = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(
            f"{path} is unreadable ({type(exc).__name__}); remove it to continue the run in a new W&B run"
        ) from None
    if not isinstance(record, dict):
        raise DataError(f"{path} is not a poslab run record; remove it to continue the run in a new W&B run")
    return record


def relaunched_config(cfg: DictConfig, run_dir: Path) -> DictConfig:
    """``cfg`` continuing ``run_dir``, the unfinished run its SLURM job or torchrun launch made before it was
    requeued or restarted: the same command, so the same config (what :mod:`poslab.run.policy` lets a resumed
    run change aside)."""
    stored = stored_config(run_dir, str(run_dir))
    changed = [k for k in differing_keys(stored, to_dict(cfg)) if not rule(k).resume]
    if changed:
        raise ConfigError(
            f"{run_dir} is this job's run, but its {CONFIG_FILE} differs in {', '.join(changed[:SHOWN])}: continue "
            f"it with {resume_command(run_dir)}, or give this job's run another run.name"
        )
    resumed = cfg.copy()
    resumed.resume, resumed.run.name = str(run_dir), run_dir.name
    return resumed


def resumable_launch_run(run_dir: Path) -> bool:
    """A SLURM job or torchrun launch that finds its own run unfinished (requeued, restarted): it resumes it."""
    return (
        cluster.current().kind != "local"
        and (run_dir / LAST_CHECKPOINT).is_file()
        and not (run_dir / "summary.json").exists()
    )
