"""The report's figures, drawn from the seed-aggregated groups of :mod:`poslab.study.report`.

Each function returns a matplotlib figure or ``None`` when the runs hold
nothing to draw, so a report shows exactly the curves its runs measured: the
training curves of every modality here, and each modality's own figures from
its package (``Modality.report_figures``).
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from collections.abc import Iterator, Sequence
from typing import Any

from poslab.modalities.registry import get_modality

#: The validation metric a modality's training curve shows, in order of preference.
VAL_CURVE = ("val/loss", "val/mse", "val/acc")


def pyplot():
    from poslab.track import plots  # deferred: matplotlib, ~0.8 s

    return plots.plt


def keyed_means(group, pattern: str) -> dict[int, float]:
    """x (the pattern's first group) -> mean over seeds, for every metric matching ``pattern``; sorted by x."""
    points = {}
    for key in {k for r in group.runs for k in r["metrics"]}:
        match = re.fullmatch(pattern, key)
        if match and (s := group.stat(key)) is not None:
            points[int(match.group(1))] = s.mean
    return dict(sorted(points.items()))


def _mean_curve(runs: Sequence[dict], key: str) -> dict[int, float]:
    """Mean over seeds at every step that all of the runs recorded."""
    per_step: dict[int, list[float]] = defaultdict(list)
    for run in runs:
        for step, value in run.get("history", {}).get(key, []):
            per_step[int(step)].append(value)
    return {s: statistics.fmean(v) for s, v in sorted(per_step.items()) if len(v) == len(runs)}


def training_curves(groups: Sequence):
    """Training loss and the modality's validation metric against the step, mean over seeds."""
    present = {k for g in groups for r in g.runs for k in r.get("history", {})}
    val_key = next((k for k in VAL_CURVE if k in present), None)
    if "train/loss" not in present and val_key is None:
        return None
    keys = [k for k in ("train/loss", val_key) if k in present]
    fig, axes = pyplot().subplots(1, len(keys), figsize=(5.6 * len(keys), 4.0), squeeze=False)
    for ax, key in zip(axes[0], keys, strict=True):
        for g in groups:
            curve = _mean_curve(g.runs, key)
            if curve:
                marker = "o" if len(curve) <= 12 else None  # a few validation points: show them
                ax.plot(list(curve), list(curve.values()), marker=marker, label=g.label)
        ax.set(xlabel="training step", ylabel=key, title=f"{key} (mean over seeds)")
        if key.endswith(("loss", "mse")):
            ax.set_yscale("log")
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def figures(modality: str, groups: Sequence) -> Iterator[tuple[str, str, Any]]:
    """(file stem, caption, figure) for everything these runs can show: the modality's figures, then training."""
    pieces = get_modality(modality).piece("report_figures")
    candidates = [*(pieces(groups) if pieces else []), ("training", "training curves", lambda: training_curves(groups))]
    for stem, caption, draw in candidates:
        fig = draw()
        if fig is not None:
            yield stem, caption, fig
