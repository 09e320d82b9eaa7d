"""``poslab dashboard COMPARE_ID``: a saved W&B workspace and a W&B Report for one comparison (online only).

Built with ``wandb-workspaces`` (``pip install 'poslab[dashboard]'``) from the comparison's own
``summary.json`` files: its runs are selected by the comparison's tag (``compare:<id>``), the job type
``train`` (an evaluation of one of its checkpoints and the comparison's report run carry the tag too) and
the setting hashes of its own runs (``setting``: what a run computes, seed aside), and grouped by W&B
group (one per encoder, variant and setting, so seeds aggregate: mean ± std); bar charts of the modality's
headline metrics, the training curves, and every curve the runs measured against its own axis (loss
against context length, accuracy against image size …). Saving needs W&B credentials and a server: without
them the command says so in one line; :func:`build_workspace` and :func:`build_report` make the objects
without saving them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from poslab.errors import PoslabError, first_line
from poslab.modalities.registry import get_modality
from poslab.run.policy import setting_hash
from poslab.study.report import find_summaries
from poslab.study.report_figures import VAL_CURVE

INSTALL_HINT = "pip install 'poslab[dashboard]' (wandb-workspaces)"
#: W&B's run attribute that holds the group (one per encoder × variant: seeds aggregate there).
GROUP = "group"


@dataclass
class DashboardPlan:
    """What the dashboard shows, read from the comparison's summaries (no W&B needed)."""

    compare_id: str
    modality: str
    entity: str | None
    project: str
    bars: list[str] = field(default_factory=list)  # headline metrics, one bar chart each
    training: list[str] = field(default_factory=list)  # step curves
    curves: dict[str, list[str]] = field(default_factory=dict)  # axis -> keys against it
    runs: int = 0
    settings: list[str] = field(default_factory=list)  # the runs' setting hashes

    @property
    def tag(self) -> str:
        return f"compare:{self.compare_id}"

    def filters(self, ws) -> list[Any]:
        """Exactly the comparison's training runs: its tag, job type ``train``, its runs' settings."""
        return [ws.Tags().isin([self.tag]), ws.Metric("JobType") == "train", ws.Config("setting").isin(self.settings)]


def compare_summaries(compare_id: str, roots: Sequence[str | Path]) -> list:
    """The training runs of one comparison under ``roots`` (by their ``compare:<id>`` tag)."""

    tag = f"compare:{compare_id}"
    return [s for s in find_summaries(roots) if tag in s.config.get("logger", {}).get("tags", [])]


def plan_dashboard(compare_id: str, summaries: Sequence, entity: str | None = None, project: str | None = None):
    """The panels for these runs; ``entity`` / ``project`` default to the runs' own logger settings."""
    if not summaries:
        raise PoslabError(f"no finished runs of comparison {compare_id}")
    first = summaries[0]
    logger = first.config.get("logger", {})
    plan = DashboardPlan(compare_id, first.modality, entity or logger.get("entity"),
                         project or logger.get("project") or "poslab", runs=len(summaries),
                         settings=sorted({setting_hash(s.config) for s in summaries}))  # fmt: skip
    measured = {k for s in summaries for k in s.metrics}
    plan.bars = [m for m in get_modality(first.modality).headline if m in measured]
    logged = {k for s in summaries for k in s.history}
    plan.training = [k for k in ("train/loss", *VAL_CURVE) if k in logged][:2]
    for s in summaries:
        for axis, keys in s.curves.items():
            plan.curves[axis] = sorted({*plan.curves.get(axis, []), *keys})
    return plan


def _imports():
    try:
        import wandb_workspaces.reports.v2 as wr  # deferred: wandb-workspaces, ~0.8 s (optional: `.[dashboard]`)
        import wandb_workspaces.workspaces as ws  # deferred: wandb-workspaces, ~0.8 s (optional: `.[dashboard]`)
    except ImportError:
        raise PoslabError(f"poslab dashboard needs wandb-workspaces: {INSTALL_HINT}") from None
    return ws, wr


def _panels(plan: DashboardPlan, wr) -> dict[str, list[Any]]:
    """Section name -> panels: grouped runs drawn as their mean, with the standard deviation as the range."""
    grouped = {"groupby_aggfunc": "mean", "groupby_rangefunc": "stddev"}
    sections = {
        "comparison": [
            wr.BarPlot(title=f"{m} (mean ± std over seeds)", metrics=[m], orientation="v", **grouped) for m in plan.bars
        ],  # fmt: skip
        "training": [wr.LinePlot(title=k, x="trainer/global_step", y=[k], **grouped) for k in plan.training],
    }
    sections["measured curves"] = [
        wr.LinePlot(title=f"{', '.join(keys)} against {axis}", x=axis, y=keys, **grouped)
        for axis, keys in plan.curves.items()
    ]
    return {name: panels for name, panels in sections.items() if panels}


def build_workspace(plan: DashboardPlan):
    """The saved view (not saved here): the comparison's runs, grouped, with its panels."""
    ws, wr = _imports()
    if not plan.entity:
        raise PoslabError("poslab dashboard needs a W&B entity: logger.entity in the runs, or --entity")
    sections = [ws.Section(name=name, panels=panels, is_open=True) for name, panels in _panels(plan, wr).items()]
    return ws.Workspace(
        entity=plan.entity,
        project=plan.project,
        name=f"poslab {plan.modality} comparison {plan.compare_id}",
        sections=sections,
        runset_settings=ws.RunsetSettings(
            filters=plan.filters(ws),
            groupby=[ws.Metric(GROUP)],
            pinned_columns=[f"summary:{m}" for m in plan.bars],
        ),
    )


def build_report(plan: DashboardPlan):
    """A W&B Report of the same panels over the same runs (not saved here)."""
    ws, wr = _imports()
    if not plan.entity:
        raise PoslabError("poslab dashboard needs a W&B entity: logger.entity in the runs, or --entity")
    runset = wr.Runset(entity=plan.entity, project=plan.project, name=plan.tag,
                       filters=plan.filters(ws), groupby=[GROUP])  # fmt: skip
    blocks: list[Any] = [
        wr.H1(text=f"{plan.modality}: comparison {plan.compare_id}"),
        wr.P(
            text=f"{plan.runs} training runs tagged {plan.tag}, grouped by encoder; bars and lines: means over seeds "
            "with their standard deviation."
        ),  # fmt: skip
    ]
    for name, panels in _panels(plan, wr).items():
        blocks += [wr.H2(text=name), wr.PanelGrid(runsets=[runset], panels=panels)]
    return wr.Report(entity=plan.entity, project=plan.project, title=f"poslab comparison {plan.compare_id}",
                     description=f"{plan.modality}, {plan.runs} runs", blocks=blocks)  # fmt: skip


def main(argv: Sequence[str]) -> int:

    parser = argparse.ArgumentParser(prog="poslab dashboard", description=__doc__.splitlines()[0])
    parser.add_argument("compare_id", help="the id `poslab compare` printed (its runs carry the tag compare:<id>)")
    parser.add_argument("--runs", nargs="+", default=["runs"], help="folders holding the runs (default: runs)")
    parser.add_argument("--entity", help="W&B entity (default: the runs' logger.entity, else your default)")
    parser.add_argument("--project", help="W&B project (default: the runs' logger.project)")
    args = parser.parse_args(list(argv))
    try:
        from poslab.track.loggers import wandb_credentials_present  # deferred: matplotlib, ~0.8 s

        plan = plan_dashboard(args.compare_id, compare_summaries(args.compare_id, args.runs), args.entity,
                              args.project)  # fmt: skip
        _imports()
        if not wandb_credentials_present():
            raise PoslabError(
                "poslab dashboard saves a workspace and a report on a W&B server (online only): "
                "no W&B credentials here; run `wandb login` (and `wandb sync` the runs) first"
            )
        if not plan.entity:
            import wandb  # deferred: W&B, ~0.8 s

            plan.entity = wandb.Api().default_entity
        workspace, report = build_workspace(plan), build_report(plan)
        try:
            workspace.save()
            report.save()
        except Exception as exc:  # no server, no permission: W&B's own words
            raise PoslabError(f"W&B could not save the dashboard: {first_line(exc)}") from None
    except PoslabError as exc:
        print(f"poslab dashboard: error: {exc}", file=sys.stderr)
        return 2
    print(f"workspace: {workspace.url}")
    print(f"report: {report.url}")
    return 0
