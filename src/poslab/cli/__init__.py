"""``poslab`` command line: parse, compose the config, call :func:`poslab.run.train.train`.

Kept import-light: Lightning, torchvision and W&B load only inside the
commands that need them, so ``poslab --help`` answers at once.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from poslab import interrupts
from poslab.cli.habits import (
    MULTIRUN,
    MULTIRUN_LINE,
    foreign_command,
    lightning_cli_form,
    override_form,
    with_config_files,
)
from poslab.errors import ConfigError, PoslabError, RunInterrupted, os_error_line, own_message
from poslab.run import denormals
from poslab.study.arguments import grid_help, parse_grid_arguments
from poslab.study.dashboard import main as dashboard_main
from poslab.study.grid import parse_worker
from poslab.study.report import build_report
from poslab.study.sweep import main as sweep_main
from poslab.study.workers import run_workers
from poslab.tools.bench import main as bench_main
from poslab.tools.scaffold import main as new_main
from poslab.track.wandb_offline import main as read_wandb_main

EPILOG = """\
examples:
  poslab train                                   vision, default encoder (sincos2d)
  poslab train encoder=rope2d seed=1             another encoder and seed
  poslab train modality=vision data=fashion_mnist trainer.max_epochs=5
  poslab train logger=csv                        no W&B; logger.mode=offline|disabled also work
  poslab train resume=last modality=text         continue the newest killed text run (same dir, same W&B run)
  poslab train --print-config encoder=learned2d  show the resolved config and exit
  poslab eval ckpt=runs/vision/<run>/checkpoints/best.ckpt data.image_size=56 data.coords=raw
  poslab train modality=text encoder=alibi       text: length generalisation at 1x..8x the context
  poslab generate ckpt=runs/text/<run>/checkpoints/best.ckpt prompt='ROMEO:' max_new_tokens=200
  poslab compare modality=vision seeds=3         every vision encoder x 3 seeds, then a report
  poslab compare modality=vision workers=2       the same grid over 2 processes (one per GPU, if any)
  poslab compare modality=vision worker=0/8      one of 8 independent jobs on one grid (a SLURM array)
  poslab report runs/text                        Markdown + PNG report from summary.json files
  poslab dashboard 20261201-101500-ab12          a W&B workspace + report for that comparison (online)
  poslab list                                    modalities and their encoders
  poslab bench --lengths 256 1024 2048          encoder step time / memory vs none
  poslab show rope layout=interleaved --json     what an encoder does to positions: PNG + numbers
"""


COMPARE_WHAT = (
    "Train every encoder x seed of the grid (each run once: a rerun skips finished runs and continues interrupted "
    "ones), then write a Markdown report and, with W&B, a report run; every run is tagged compare:<id>."
)
COMPARE_KEYS = {
    "workers": "train the grid in N processes of this machine (one report)",
    "worker": "be worker I of N independent jobs (a SLURM array: worker=$SLURM_ARRAY_TASK_ID/N)",
}
#: The commands whose output appears whole or not at all: an interrupted one wrote nothing.
WHOLE = ("report", "sweep")
#: The commands that take ``key=value`` overrides.
OVERRIDING = ("train", "eval", "generate", "compare", "sweep", "prepare")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="poslab",
        description="Train small transformers with pluggable position encoders and compare them.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(
        dest="command",
        metavar="{train,eval,generate,compare,prepare,report,dashboard,list,bench,show,new,sweep,read-wandb}",
    )
    train = sub.add_parser("train", help="train one model (key=value overrides)")
    train.add_argument("overrides", nargs="*", metavar="key=value")
    train.add_argument(
        "--print-config", "--print_config", action="store_true", help="print the resolved config and exit"
    )
    train.add_argument("--cfg", choices=["job"], help="Hydra's form of --print-config")
    train.add_argument(
        "--options", action="store_true", help="list every config key with its type, default and value, and exit"
    )
    evaluate = sub.add_parser("eval", help="re-evaluate a checkpoint: ckpt=PATH [key=value ...]")
    evaluate.add_argument("overrides", nargs="*", metavar="key=value")
    generating = sub.add_parser(
        "generate",
        help="continue a prompt with a language model's checkpoint: ckpt=PATH prompt=TEXT [max_new_tokens=200] "
        "[temperature=0.8] [top_k=200] [samples=1] [seed=0]",
    )
    generating.add_argument("overrides", nargs="*", metavar="key=value")
    preparing = sub.add_parser("prepare", help="tokenize a corpus into streamed shards once: [key=value ...] as train")
    preparing.add_argument("overrides", nargs="*", metavar="key=value")
    comparing = sub.add_parser(
        "compare",
        help="every encoder x seeds, then a report: [modality=M] [experiment=X] [encoders=[a,b]] [seeds=3] [key=value]",
        usage=argparse.SUPPRESS,
        description=grid_help("poslab compare", COMPARE_WHAT, COMPARE_KEYS),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    comparing.add_argument("overrides", nargs="*", metavar="key=value")
    reporting = sub.add_parser("report", help="a Markdown + PNG report from the summary.json files under DIRs")
    reporting.add_argument("dirs", nargs="*", default=["runs"])
    reporting.add_argument("--out", default="reports", help="where reports go (default: reports/)")
    listing = sub.add_parser("list", help="list modalities and the encoders that fit each")
    listing.add_argument("modality", nargs="?")
    # bench parses its own options (--lengths, --batch, ...): main() hands them over untouched
    sub.add_parser("bench", help="time and memory of each 1D encoder against none (--lengths, --batch, ...)")
    sub.add_parser("show", help="draw what an encoder does: ENCODER [key=value ...] [--modality --length --out --json]")
    sub.add_parser("new", help="stub files: encoder NAME --hook HOOK [--reads F] | dataset NAME --modality M")
    sub.add_parser("dashboard", help="save a W&B workspace + report for one comparison (online): COMPARE_ID")
    sub.add_parser("read-wandb", help="what an offline W&B run holds (run, config, summary; --history KEY): DIR")
    sub.add_parser("sweep", help="print a W&B grid sweep: [modality=M] [experiment=X] [encoders=[a,b]] [seeds=N]")
    return parser


def main(argv: Sequence[str] | None = None, flush: bool = False) -> int:
    """Every command runs under the one interrupt path (:mod:`poslab.interrupts`): a signal from the first line
    of composing to the last line of a report ends it with its line and exit 128 + signal. A mistyped key is
    found before torch loads (:mod:`~poslab.cli.typos`); ``flush``: then flush denormals, as the command does."""
    argv = [lightning_cli_form(a) for a in (sys.argv[1:] if argv is None else argv)]
    try:
        if argv[:1]:
            foreign_command(argv[0])
        if argv[:1] and argv[0] in OVERRIDING:  # Hydra's override forms, as the commands taking key=value read them
            argv = argv[:1] + [override_form(a) if "=" in a or a.startswith("~") else a
                               for a in with_config_files(argv[1:])]  # fmt: skip
        if argv[:1] in (["train"], ["prepare"]):
            from poslab.cli.typos import check_keys  # deferred: OmegaConf, 0.1 s of `poslab --help`'s 0.13 s

            check_keys(argv[1:])
        if flush and argv[:1] and argv[0] in COMPUTING and not launches_workers(argv):
            denormals.flush_denormals()  # through the module: a test can stand in for it
        with interrupts.handled():
            return _dispatch(argv)
    except RunInterrupted as exc:
        whole = argv[:1] and argv[0] in WHOLE  # (a signal while `poslab` alone prints its help: no command)
        again = f"; nothing was written: run the same `poslab {argv[0]}` command again" if whole else ""
        print(f"poslab: {exc}{again}", file=sys.stderr)
        return exc.exit_code
    except PoslabError as exc:
        print(f"poslab: error: {own_message(exc)}", file=sys.stderr)
        return 2
    except OSError as exc:  # a full disk, a read-only mount, a file where a folder should be: path and cause
        print(f"poslab: error: {os_error_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("poslab: interrupted", file=sys.stderr)
        return 130


def _dispatch(argv: list[str]) -> int:
    plugin_mains = {"bench": bench_main, "sweep": sweep_main, "dashboard": dashboard_main, "new": new_main,
                    "read-wandb": read_wandb_main}  # fmt: skip
    if argv[:1] == ["show"]:
        from poslab.tools.show import main as show_main  # deferred: torch and matplotlib, ~3 s

        return show_main(argv[1:])
    if argv[:1] and argv[0] in plugin_mains:
        return plugin_mains[argv[0]](argv[1:])
    if argv[:1] in (["train"], ["compare"], ["eval"]) and any(a in MULTIRUN for a in argv[1:]):
        raise ConfigError(MULTIRUN_LINE)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    commands = {"train": _train, "eval": _eval, "generate": _generate, "compare": _compare, "prepare": _prepare,
                "report": _report_cmd, "list": _list}  # fmt: skip
    return commands[args.command](args)


def _train(args: argparse.Namespace) -> int:
    from poslab.cli.typos import remember_keys  # deferred: OmegaConf, 0.1 s of `poslab --help`'s 0.13 s
    from poslab.config.composition import to_yaml  # deferred: torch (the encoders), ~2.6 s
    from poslab.run.resume import command_config  # deferred: torch (composing reads the encoders), ~2.6 s

    cfg = command_config(args.overrides)
    remember_keys()
    if args.print_config or args.cfg:
        print(to_yaml(cfg), end="")
        return 0
    if args.options:
        from poslab.tools.options import option_rows  # deferred: torch (the encoders), ~2.6 s

        rows = [("key", "type", "default", "value"), *option_rows(cfg)]
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        for key, kind, default, value in rows:
            print(f"{key:<{widths[0]}}  {kind:<{widths[1]}}  {default:<{widths[2]}}  {value}")
        return 0
    from poslab.run.train import train  # deferred: Lightning, ~7.5 s

    _report(train(cfg))
    return 0


def _prepare(args: argparse.Namespace) -> int:
    from poslab.cli.typos import remember_keys  # deferred: OmegaConf, 0.1 s of `poslab --help`'s 0.13 s
    from poslab.config.composition import compose  # deferred: torch (composing reads the encoders), ~2.6 s
    from poslab.run.prepare import prepare  # deferred: Lightning (the data modules), ~7.5 s

    cfg = compose(args.overrides)
    remember_keys()
    prepare(cfg)
    return 0


def _eval(args: argparse.Namespace) -> int:
    ckpts = [o for o in args.overrides if o.startswith("ckpt=")]
    if len(ckpts) != 1:
        raise PoslabError("poslab eval needs exactly one ckpt=PATH")
    from poslab.run.train import evaluate  # deferred: Lightning, ~7.5 s

    _report(evaluate(ckpts[0].split("=", 1)[1], [o for o in args.overrides if o not in ckpts]))
    return 0


def _generate(args: argparse.Namespace) -> int:
    ckpts = [o for o in args.overrides if o.startswith("ckpt=")]
    if len(ckpts) != 1:
        raise PoslabError("poslab generate needs exactly one ckpt=PATH")
    from poslab.run.generate import Sampling, generate  # deferred: torch and the tasks, ~7.5 s

    sampling, overrides = Sampling.parse([o for o in args.overrides if o not in ckpts])
    for index, text in enumerate(generate(ckpts[0].split("=", 1)[1], sampling, overrides)):
        print(*(["---"] if index else []), sampling.prompt + text, sep="\n")  # samples apart by a line of ---
    return 0


def _compare(args: argparse.Namespace) -> int:
    """A signal before the grid starts (while its modules load) says how to continue, as one inside it does."""
    try:
        return _compare_grid(args)
    except RunInterrupted as exc:
        if "poslab compare" in str(exc):
            raise
        raise RunInterrupted(
            f"{exc}; rerun the same `poslab compare` command to continue the grid", exc.exit_code - 128
        ) from None


def _compare_grid(args: argparse.Namespace) -> int:
    from poslab.study.compare import compare  # deferred: torch (the encoders), ~2.4 s

    grid = parse_grid_arguments(args.overrides, "poslab compare", own=("workers", "worker"))
    if "workers" in grid.extra:
        count = grid.extra["workers"]
        if not isinstance(count, int) or isinstance(count, bool) or count < 1 or "worker" in grid.extra:
            raise PoslabError(f"workers={count!r} must be a number of processes >= 1 (and not given with worker=)")
        if count > 1:
            return run_workers([a for a in args.overrides if not a.startswith("workers=")], count)
    worker = parse_worker(grid.extra["worker"]) if "worker" in grid.extra else None
    result = compare(grid.modality, grid.encoders, grid.seeds, grid.overrides, worker=worker)
    return 1 if any(o.status == "failed" for o in result["outcomes"]) else 0


def _report_cmd(args: argparse.Namespace) -> int:

    print(build_report(args.dirs, args.out))
    return 0


def _list(args: argparse.Namespace) -> int:
    from poslab.config.files import config_dirs, group_choices  # deferred: OmegaConf, 0.1 s of `poslab --help`'s 0.13 s
    from poslab.encoders import available_encoders, encoder_class  # deferred: torch, ~2.6 s

    modalities = [args.modality] if args.modality else group_choices("modality")
    if not modalities:
        folders = ", ".join(str(d) for d in config_dirs())
        raise PoslabError(f"no modality configs under {folders}; set POSLAB_CONFIG_DIR to a configs/ folder")
    for modality in modalities:
        names = available_encoders(modality)
        print(f"{modality}: " + ", ".join(f"{n} ({'+'.join(encoder_class(n).hooks()) or 'no hooks'})" for n in names))
    return 0


def _report(summary: dict) -> None:
    """The lines a user needs at the end of a run (once: by rank 0 of a DDP run)."""
    from lightning.pytorch.utilities import rank_zero_only  # deferred: Lightning, ~7 s

    if rank_zero_only.rank:
        return
    metrics = summary["metrics"]
    shown = {k: v for k, v in metrics.items() if k.startswith("test/") and not k.endswith("per_class")}
    print(f"\nrun directory: {summary['run_dir']}")
    print("metrics: " + ", ".join(f"{k}={v:.4f}" for k, v in sorted(shown.items())))
    print(f"wall time: {summary['wall_time_s']:.1f} s, summary: {summary['run_dir']}/summary.json")
    wandb, logger = summary["wandb"], (summary.get("config") or {}).get("logger", {})
    if wandb["sync_command"]:
        print(f"W&B ran offline; to upload: {wandb['sync_command']}")
    elif wandb["url"]:
        print(f"W&B: {wandb['url']}")
    kinds = [logger.get("name"), *logger.get("also", [])]
    if "csv" in kinds:
        print(f"CSV log: {summary['run_dir']}/csv/metrics.csv")
    if "tensorboard" in kinds:
        print(f"TensorBoard log: tensorboard --logdir {summary['run_dir']}/tensorboard")


#: The commands that train or time models: they flush denormals (help, list, new and sweep import no torch).
COMPUTING = ("train", "eval", "generate", "compare", "bench", "show", "prepare")


def launches_workers(argv: Sequence[str]) -> bool:
    """``compare ... workers=N`` with N > 1: this process only starts and waits for the workers (each flushes
    its own), so it need not import torch (1.5 s before the first worker starts, measured on 2 cores)."""
    counts = [a.partition("=")[2] for a in argv[1:] if a.startswith("workers=")]
    return argv[:1] == ["compare"] and any(c.isdigit() and int(c) > 1 for c in counts)


def run() -> None:
    """The ``poslab`` command: denormals flushed before torch starts its threads (:mod:`poslab.run.denormals`)."""
    sys.exit(main(flush=True))


if __name__ == "__main__":
    run()
