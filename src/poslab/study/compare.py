"""``poslab compare``: every encoder that fits a modality, over several seeds, then a report.

Runs the grid one run after another in this process, each a normal
:func:`poslab.run.train.train` with its own finished W&B run (tagged with the
comparison id, grouped per encoder). A run is named after its encoder, seed
and config hash, so a rerun skips every run whose ``summary.json`` already
exists for the same config, continues one that was interrupted from its
``last.ckpt`` (same directory, same W&B run), and a changed config trains
again. A failing run is reported and the rest continue; an interrupted one
(SIGTERM, Ctrl-C) stops the comparison, and the same command resumes it. At the end: the Markdown report
(:mod:`poslab.study.report`) and one W&B run (``job_type=report``) holding the
comparison table and the overlay charts.
"""

from __future__ import annotations

import shlex
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from poslab import interrupts
from poslab.config.composition import ALL_ENCODERS, compose, to_dict
from poslab.encoders import available_encoders, encoder_class
from poslab.errors import ConfigError, PoslabError, RunInterrupted, first_line, os_error_line
from poslab.modalities.registry import get_modality
from poslab.run.policy import config_hash
from poslab.run.resume import LAST_CHECKPOINT
from poslab.run.rundir import RunInUse, clear_run_dir, run_lock
from poslab.study.grid import SharedGrid
from poslab.study.report import build_report, check_expectations, find_summaries, group_runs, metric_columns


@dataclass
class Outcome:
    encoder: str
    seed: int
    run_dir: Path
    status: str  # trained | resumed | skipped | failed
    seconds: float = 0.0
    error: str | None = None
    metrics: dict[str, float] = field(default_factory=dict)


def expand_encoders(listed: list[str], fitting: list[str]) -> list[str]:
    """``listed`` with ``all`` replaced by ``fitting`` (the modality's encoders), each encoder once, in order:
    ``[all, rope+cyclic]`` is every single encoder and one composite."""
    out: list[str] = []
    for name in listed:
        out += fitting if name == ALL_ENCODERS else [name]
    return list(dict.fromkeys(out))


def split_variants(
    variants: dict[str, list[str]], modality: str
) -> tuple[dict[str | None, list[str]], dict[str, dict[str, list[str]]]]:
    """``compare_variants`` as (the variants every encoder runs, ``{None: []}`` when none; encoder -> the
    variants only it runs). An encoder's own variant (``<encoder>/<name>``) must name an encoder (or a
    combination) that fits the modality, and a name no shared variant has: one line otherwise."""
    shared: dict[str | None, list[str]] = {k: v for k, v in variants.items() if "/" not in k}
    own: dict[str, dict[str, list[str]]] = {}
    for key, changes in variants.items():
        if "/" not in key:
            continue
        encoder, _, name = key.partition("/")
        if not name or "/" in name:
            raise ConfigError(f"compare_variants '{key}': an encoder's own variant is '<encoder>/<name>'")
        try:
            encoder_class(encoder, modality)
        except ConfigError as exc:
            raise ConfigError(
                f"compare_variants '{key}' names no encoder '{encoder}' of this modality ({exc})"
            ) from None
        if name in shared:
            raise ConfigError(f"compare_variants '{key}': '{name}' is a variant of every encoder already")
        own.setdefault(encoder, {})[name] = changes
    return shared or {None: []}, own


def plan(
    modality: str, encoders: list[str] | None, seeds: int | None, overrides: list[str]
) -> list[tuple[str, int, Any]]:
    """(label, seed, composed config) for every run of the grid, named by config hash.

    ``seeds`` None: the experiment's ``compare_seeds``.

    The grid is encoder × variant × seed: ``compare_variants`` (name -> overrides) runs every encoder
    once per variant, labelled ``<encoder>/<variant>``; without variants the label is the encoder. A variant
    named ``<encoder>/<name>`` is that encoder's alone: it runs beside the encoder's other runs (one option
    set against the encoder's defaults, as ``mrope/interleaved: [encoder.interleaved=true]``).
    """
    base = compose([f"modality={modality}", *overrides])
    if base.compare_experiment and not any(o.startswith("experiment=") for o in overrides):
        # the modality's default comparison (sized to finish in ~20 min on 2 CPU cores)
        overrides = [f"experiment={base.compare_experiment}", *overrides]
        base = compose([f"modality={modality}", *overrides])
    seeds = base.compare_seeds if seeds is None else seeds
    if seeds < 1:
        raise ConfigError(f"seeds must be at least 1, got {seeds}")
    encoders = expand_encoders(encoders or list(base.compare_encoders) or [ALL_ENCODERS], available_encoders(modality))
    shared, own = split_variants({k: list(v) for k, v in base.compare_variants.items()}, modality)
    grid = []
    for encoder in encoders:
        for variant, changes in [*shared.items(), *own.get(encoder, {}).items()]:
            label = f"{encoder}/{variant}" if variant else encoder
            for seed in range(seeds):
                named = [f"variant={variant}"] if variant else []
                cfg = compose([f"modality={modality}", f"encoder={encoder}", f"seed={seed}", *changes, *named,
                               *overrides])  # fmt: skip
                cfg.run.name = f"{label.replace('/', '-')}-s{seed}-{config_hash(to_dict(cfg))}"
                grid.append((label, seed, cfg))
    return grid


def compare(
    modality: str,
    encoders: list[str] | None = None,
    seeds: int | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    reports: str | Path = "reports",
    echo=print,
    worker: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """Run (or resume) the grid; returns the outcomes, the report path and the comparison id. ``worker``
    ``(I, N)``: one of N workers sharing the grid (:mod:`poslab.study.grid`). A signal stops it
    (:class:`RunInterrupted`), and the same command continues."""

    with interrupts.handled():
        try:
            return _compare(modality, encoders, seeds, overrides, reports, echo, worker)
        except RunInterrupted as exc:  # while planning the grid or between its runs: nothing half-done
            if "poslab compare" in str(exc):
                raise
            raise RunInterrupted(
                f"{exc} between runs; rerun the same `poslab compare` command to continue the grid",
                exc.exit_code - 128,
            ) from None


#: How often a worker looks again at runs other workers are training (a claim freed by a killed worker).
POLL_SECONDS = 0.5


def _compare(modality, encoders, seeds, overrides, reports, echo, worker=None) -> dict[str, Any]:
    """The grid, each run claimed by its lock. Alone (``worker`` None), a run another process trains is
    skipped; as one of several workers (``worker=(I, N)``: starting at its share of the grid), it waits for
    the other workers' runs and takes over any whose worker is gone, and the last to settle reports."""
    grid = plan(modality, encoders, seeds, list(overrides))
    shared = SharedGrid.of([Path(cfg.run.root) / cfg.modality / cfg.run.name for _, _, cfg in grid])
    compare_id = shared.compare_id()
    start_at = worker[0] * len(grid) // worker[1] if worker else 0
    pending = [*enumerate(grid, start=1)][start_at:] + [*enumerate(grid, start=1)][:start_at]
    outcomes: list[Outcome] = []
    started, waiting = time.perf_counter(), False
    try:
        while pending:
            busy = []
            for index, entry in pending:
                outcome = _run_one(index, len(grid), entry, shared, compare_id, waiting=worker is not None, echo=echo)
                if outcome is None:
                    busy.append((index, entry))
                    continue
                outcomes.append(outcome)
                if outcome.status in ("trained", "resumed", "failed"):
                    trained = [o for o in outcomes if o.status != "skipped"]
                    result = f"failed: {outcome.error}" if outcome.error else f"{outcome.seconds:.0f} s"
                    left = len(grid) - sum(shared.settled(p, compare_id) for p in shared.runs)
                    eta = sum(o.seconds for o in trained) / len(trained) * left / (worker[1] if worker else 1)
                    echo(f"[{index}/{len(grid)}] {outcome.encoder} seed {outcome.seed}: {result} | elapsed "
                         f"{time.perf_counter() - started:.0f} s, ETA {eta:.0f} s")  # fmt: skip
            pending = [(i, e) for i, e in busy if not shared.settled(shared.runs[i - 1], compare_id)]
            if pending:
                if not waiting:
                    echo(f"waiting for {len(pending)} run(s) other workers are training")
                    waiting = True
                time.sleep(POLL_SECONDS)
    except RunInterrupted:
        shared.forget_own_failures(compare_id)  # the same command retries them
        raise
    run_dirs = [p for p in shared.runs if (p / "summary.json").exists()]
    in_use = [p for p in shared.runs if not shared.settled(p, compare_id)]  # skipped: another process trains them
    if in_use:
        echo(
            f"{len(in_use)} run(s) of the grid are in use by another process; the comparison that trains them "
            "writes the report when it finishes (or rerun this command then)"
        )
        return {"id": compare_id, "outcomes": outcomes, "report": None}
    with shared.reporting(compare_id) as mine:
        if not mine:
            echo("every run of the grid is settled; another worker writes the report")
            return {"id": compare_id, "outcomes": outcomes, "report": None}
        try:
            report = _report(grid, compare_id, modality, run_dirs, reports, echo)
        except RunInterrupted as exc:  # the claim is released unmarked: the rerun reports
            raise RunInterrupted(
                f"{str(exc).split(';')[0]} while reporting; every run is done: rerun the same `poslab compare` "
                "command to write the report",
                exc.exit_code - 128,
            ) from None
        shared.reported(compare_id)
    shared.close(compare_id)
    failed = [(e, s, shared.failed(p, compare_id)) for (e, s, _), p in zip(grid, shared.runs, strict=True)]
    failed = [f for f in failed if f[2]]  # in any worker
    if failed:
        echo(f"{len(failed)} run(s) failed: " + "; ".join(f"{e} seed {s}: {error}" for e, s, error in failed))
    return {"id": compare_id, "outcomes": outcomes, "report": report}


def _run_one(index, total, entry, shared: SharedGrid, compare_id: str, waiting: bool, echo) -> Outcome | None:
    """Train (or resume, or skip) one run of the grid while holding its claim; None: another worker holds it
    and ``waiting`` (as one of several workers) says to come back to it."""
    from poslab.run.train import train  # deferred: Lightning, ~7.5 s

    encoder, seed, cfg = entry
    run_dir = Path(cfg.run.root) / cfg.modality / cfg.run.name
    head = f"[{index}/{total}] {encoder} seed {seed}"
    if (run_dir / "summary.json").exists():
        echo(f"{head}: already done ({run_dir}), skipped")
        return Outcome(encoder, seed, run_dir, "skipped")
    failed_elsewhere = shared.failed(run_dir, compare_id)
    if failed_elsewhere:
        echo(f"{head}: failed in another worker ({failed_elsewhere}), skipped")
        return Outcome(encoder, seed, run_dir, "skipped")
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        with run_lock(run_dir):  # the claim: released when this process ends, however it ends
            if (run_dir / "summary.json").exists():  # finished by another worker while this one looked
                return Outcome(encoder, seed, run_dir, "skipped")
            cfg.logger.tags = [*cfg.logger.tags, f"compare:{compare_id}"]
            status = "trained"
            if (run_dir / LAST_CHECKPOINT).is_file():  # interrupted earlier: its name vouches for the same config
                cfg.resume, status = str(run_dir.resolve()), "resumed"
                echo(f"{head}: continuing the interrupted run in {run_dir}")
            else:  # killed before its first checkpoint (or never started): start clean
                clear_run_dir(run_dir)
            start = time.perf_counter()
            try:
                summary = train(cfg)
            except RunInterrupted as exc:
                requeued = [part for part in str(exc).split("; ") if part.startswith("requeued SLURM job")]
                then = (
                    "it continues the grid"
                    if requeued
                    else "rerun the same `poslab compare` command to continue the grid"
                )
                raise RunInterrupted(
                    f"{head}: {str(exc).split(';')[0]}; {'; '.join([*requeued, then])}", exc.exit_code - 128
                ) from None
            except Exception as exc:  # a failing run is reported; the others go on
                if not isinstance(exc, (PoslabError, OSError)):  # a bug: its traceback; a fault: its line below
                    traceback.print_exc()
                line = os_error_line(exc) if isinstance(exc, OSError) else first_line(exc)
                shared.mark_failed(run_dir, compare_id, line)
                return Outcome(encoder, seed, run_dir, "failed", time.perf_counter() - start, error=line)
            return Outcome(encoder, seed, run_dir, status, time.perf_counter() - start, metrics=summary["metrics"])
    except RunInUse as exc:  # another process trains it now
        if waiting:
            return None
        echo(f"{head}: run directory {run_dir} is in use by another poslab process, skipped")
        return Outcome(encoder, seed, run_dir, "skipped", error=str(exc))


def _report(grid, compare_id: str, modality: str, run_dirs: list[Path], reports, echo) -> Path | None:
    """The Markdown report and the W&B report run of the finished runs."""
    report = None
    if run_dirs:
        cfg = grid[0][2]  # the experiment's expectations as its YAML states them now (a reused run's may be older)
        expect = {cfg.get("experiment"): list(cfg.expect)}
        report = build_report(run_dirs, reports, title=f"{modality}: comparison {compare_id}", expect=expect)
        echo(f"report: {report}")
        report_run = log_report_run(grid[0][2], compare_id, run_dirs, echo, report_dir=report.parent)
        sync = sync_command(run_dirs, report_run)
        if sync:
            echo(f"W&B ran offline; to upload every run of this comparison: {sync}")
        if cfg_logs_to_wandb(grid[0][2]):
            echo(f"W&B: runs tagged compare:{compare_id}; online, `poslab dashboard {compare_id}` saves a workspace")
    return report


def overlay_series(groups) -> dict[str, tuple[str, str, dict[str, dict[int, float]]]]:
    """chart key -> (title, x name, encoder -> {x: mean y}): every encoder's curve in one chart (the
    modality's ``overlays``)."""

    overlays = get_modality(groups[0].modality).piece("overlays") if groups else None
    return overlays(groups) if overlays else {}


def modality_data(groups) -> dict[str, tuple[list[str], list[list]]]:
    """table key -> (columns, rows): the modality's own tables for the W&B report run (``report_data``)."""
    data = get_modality(groups[0].modality).piece("report_data") if groups else None
    return data(groups) if data else {}


def cfg_logs_to_wandb(cfg) -> bool:
    from poslab.track.loggers import resolve_wandb_mode  # deferred: matplotlib, ~0.8 s

    return cfg.logger.name == "wandb" and resolve_wandb_mode(cfg.logger.mode) != "disabled"


def wide_table(groups) -> tuple[list[str], list[list[Any]]]:
    """A row per encoder (× variant): runs, parameters, step time, tokens/s and MFU, then mean / std / n of every
    metric the report shows (std empty for one seed: undefined), and whether the expectations that apply to it held
    (True / False, None: one could not be checked), those of its encoder's mean over the variants too."""

    columns = metric_columns(groups)
    verdicts: dict[str, list] = {}
    for text, label, held, detail in check_expectations(groups):
        verdicts.setdefault(label, []).append((text, held, detail))
    header = ["encoder", "runs", "params", "ms_per_step", "tokens_per_s", "mfu"]
    header += [f"{c} {part}" for c in columns for part in ("mean", "std", "n")]
    header += ["expectations_held", "expectations"]
    rows = []
    for g in groups:
        row = [g.label, len(g.runs), g.mean_of("num_params")]
        row += [s.mean if (s := g.stat(f"perf/{key}")) else None for key in ("train_step_ms", "tokens_per_s", "mfu")]
        for c in columns:
            s = g.stat(c)
            row += [s.mean, s.std, s.n] if s is not None else [None, None, 0]
        mine = verdicts.get(g.label, []) + (verdicts.get(f"{g.encoder}/mean", []) if "/" in g.label else [])
        held = [h for _, h, _ in mine]
        row.append(None if not mine or None in held else all(held))
        row.append("; ".join(f"{text}: {'held' if h else 'not checked' if h is None else 'did not hold'} ({d})"
                             for text, h, d in mine))  # fmt: skip
        rows.append(row)
    return header, rows


def bar_series(groups) -> dict[str, list[list[Any]]]:
    """Headline metric -> rows of (encoder, mean, std, n): one bar chart each."""

    out = {}
    for metric in get_modality(groups[0].modality).headline if groups else ():
        rows = [[g.label, s.mean, s.std, s.n] for g in groups if (s := g.stat(metric)) is not None]
        if rows:
            out[metric] = rows
    return out


def sync_command(run_dirs: list[Path], report_run: str | None) -> str | None:
    """One ``wandb sync`` of every offline W&B run of the comparison (its training runs and its report run)."""

    folders = [str(f) for d in run_dirs for f in sorted(Path(d).glob("wandb/offline-run-*"))]
    folders += [report_run] if report_run else []
    return "wandb sync " + " ".join(shlex.quote(f) for f in folders) if folders else None


def log_report_run(
    cfg, compare_id: str, run_dirs: list[Path], echo=print, report_dir: Path | None = None
) -> str | None:
    """One W&B run (``job_type=report``): the wide table (a row per encoder), a bar chart per headline
    metric, the overlay line charts, the report's figures, and the report (Markdown, PNGs, every run's
    ``summary.json``) as an artifact. Returns its local folder when it ran offline."""
    if not cfg_logs_to_wandb(cfg):
        return None
    import wandb  # deferred: W&B, ~0.8 s

    from poslab.track.loggers import (
        effective_wandb_mode,
        resolve_wandb_mode,
        start_run_with_fallback,
        wandb_settings,
    )  # deferred: matplotlib, ~0.8 s

    mode = resolve_wandb_mode(cfg.logger.mode)
    summaries = find_summaries(run_dirs)
    groups = group_runs(summaries)
    init = {
        "project": cfg.logger.project,
        "entity": cfg.logger.entity,
        "job_type": "report",
        "group": f"compare-{compare_id}",
        "name": f"report-{cfg.modality}-{compare_id}",
        "tags": [f"compare:{compare_id}", cfg.modality, "report"],
        "dir": str(Path(cfg.run.root)),
        "config": {
            "modality": cfg.modality,
            "compare_id": compare_id,
            "runs": len(run_dirs),
            "experiment": cfg.experiment,
        },  # fmt: skip
    }

    def start(mode: str):
        wandb.setup(wandb_settings())
        try:
            return wandb.init(**init, mode=mode, settings=wandb_settings())
        except BaseException:
            wandb.teardown()  # nothing half-started for the offline retry
            raise

    run, mode = start_run_with_fallback(start, effective_wandb_mode(mode), Path(cfg.run.root) / "wandb")
    header, rows = wide_table(groups)
    run.log({"compare/table": wandb.Table(columns=header, data=rows)})
    for metric, bars in bar_series(groups).items():
        table = wandb.Table(columns=["encoder", "mean", "std", "n"], data=bars)
        title = f"{metric}: mean over seeds (std and n in compare/table)"
        run.log({f"compare/{metric}_bar": wandb.plot.bar(table, "encoder", "mean", title=title)})
    for key, (title, xname, series) in overlay_series(groups).items():
        names = list(series)
        chart = wandb.plot.line_series(
            xs=[list(series[n]) for n in names],
            ys=[list(series[n].values()) for n in names],
            keys=names,
            title=title,
            xname=xname,
        )
        run.log({key: chart})
    for key, (columns, rows) in modality_data(groups).items():
        run.log({key: wandb.Table(columns=columns, data=rows)})
    for png in sorted(report_dir.glob("*.png")) if report_dir else []:
        run.log({f"compare/figure/{png.stem}": wandb.Image(str(png))})
    run.log_artifact(report_artifact(compare_id, summaries, report_dir))
    directory = str(Path(run.dir).parent) if mode == "offline" else None
    run.finish()
    wandb.teardown()
    return directory


def report_artifact(compare_id: str, summaries, report_dir: Path | None):
    """``compare-<id>`` (type ``report``): report.md, its figures, and each run's summary.json under
    ``runs/<modality>/<run name>/``."""
    import wandb  # deferred: W&B, ~0.8 s

    artifact = wandb.Artifact(f"compare-{compare_id}", type="report")
    for path in sorted(report_dir.iterdir()) if report_dir else []:
        if path.is_file():
            artifact.add_file(str(path), name=path.name)
    for summary in summaries:
        artifact.add_file(
            summary.path,
            name=f"runs/{summary.modality}/{summary.run_name or Path(summary.path).parent.name}/summary.json",
        )
    return artifact
