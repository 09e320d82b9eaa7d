"""Text report pieces: the length study's tables and curves, RoPE extensions, recall by depth."""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from collections.abc import Sequence

from poslab.study.report_figures import pyplot
from poslab.track.tables import markdown_table


def multiples(group, prefix: str) -> dict[str, dict[int, float]]:
    """variant -> length multiple -> mean over seeds, from ``<prefix>@<m>x[/<variant>]`` metrics."""
    series: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for run in group.runs:
        for key, value in run["metrics"].items():
            match = re.fullmatch(re.escape(prefix) + r"@(\d+)x(?:/(.+))?", key)
            if match:
                series[match.group(2) or "base"][int(match.group(1))].append(value)
    return {v: {m: statistics.fmean(vals) for m, vals in sorted(ms.items())} for v, ms in series.items()}


def _length_panel(ax, series: dict[str, dict[int, float]], label: str, title: str, styles=None) -> None:
    """One line per series against the length multiple (log2 axis)."""
    for name, points in series.items():
        ax.plot(list(points), list(points.values()), marker="o", label=name, **(styles or {}).get(name, {}))
    ax.set_xscale("log", base=2)
    ticks = sorted({m for points in series.values() for m in points})
    ax.set_xticks(ticks, [f"{m}x" for m in ticks])
    ax.set(xlabel="evaluation length (multiple of the training context)", ylabel=label)
    ax.set_title(title)
    ax.legend(fontsize=8)


def length_curves(groups: Sequence, prefix: str, label: str):
    """Every encoder's unscaled curve in one chart: the ALiBi paper's Figure 1 at CPU scale."""
    data = {g.label: multiples(g, prefix).get("base") for g in groups}
    data = {k: v for k, v in data.items() if v}
    if not data:
        return None
    fig, ax = pyplot().subplots(figsize=(6.4, 4.0))
    _length_panel(ax, data, label, f"{label} vs evaluation length")
    fig.tight_layout()
    return fig


def scaling_curves(groups: Sequence, prefix: str, label: str):
    """One panel per encoder that has evaluation-time extensions (RoPE: PI, NTK, dynamic, YaRN)."""
    data = {g.label: multiples(g, prefix) for g in groups}
    data = {k: v for k, v in data.items() if len(v) > 1}
    if not data:
        return None
    fig, axes = pyplot().subplots(1, len(data), figsize=(6.4 * len(data), 4.0), squeeze=False)
    for ax, (encoder, variants) in zip(axes[0], data.items(), strict=True):
        named = {("no scaling" if v == "base" else v): points for v, points in variants.items()}
        title = f"{encoder}: context extensions applied at evaluation"
        _length_panel(ax, named, label, title, styles={"no scaling": {"color": "black", "linewidth": 2}})
    fig.tight_layout()
    return fig


DEPTH_TABLE = "lengen/acc_by_depth"  # rows [length, depth bucket start, accuracy or None]


def depth_accuracy(group) -> dict[int, dict[float, float | None]]:
    """length -> depth bucket -> mean accuracy over seeds (None: no query fell in the bucket)."""
    cells: dict[int, dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    for run in group.runs:
        for length, depth, acc in run.get("tables", {}).get(DEPTH_TABLE, {}).get("rows", []):
            values = cells[int(length)][float(depth)]
            if acc is not None:
                values.append(acc)
    return {
        length: {d: (statistics.fmean(v) if v else None) for d, v in sorted(by_depth.items())}
        for length, by_depth in sorted(cells.items())
    }


def recall_depth(groups: Sequence):
    """Associative recall: accuracy by depth of the queried pair x length, one heatmap per encoder."""
    from poslab.track import plots  # deferred: matplotlib, ~0.8 s

    data = {g.label: grid for g in groups if (grid := depth_accuracy(g))}
    if not data:
        return None
    lengths = sorted({n for grid in data.values() for n in grid})  # shared rows: panels share the y axis
    depths = sorted({d for grid in data.values() for row in grid.values() for d in row})
    fig, axes = pyplot().subplots(
        1, len(data), figsize=(3.2 * len(data) + 1.2, 3.4), squeeze=False, sharey=True, layout="constrained"
    )
    for index, (ax, (label, grid)) in enumerate(zip(axes[0], data.items(), strict=True)):
        rows = [[grid.get(n, {}).get(d) for d in depths] for n in lengths]
        image = plots.draw_depth_heatmap(ax, lengths, rows, label)
        buckets = len(ax.get_xticks())
        ax.set_xticks(range(0, buckets, 2), [f"{b / buckets:.1f}" for b in range(0, buckets, 2)])
        ax.set(xlabel="depth of the queried pair", ylabel="sequence length" if index == 0 else "")
    fig.colorbar(image, ax=axes[0].tolist(), shrink=0.9, label="accuracy (mean over seeds)")
    return fig


def variant_tables(groups: Sequence, prefix: str) -> list[str]:
    """Per encoder with evaluation-time variants (RoPE extensions): variant x length multiple."""
    lines = []
    for g in groups:
        variants = multiples(g, prefix)
        if len(variants) < 2:
            continue
        lengths = sorted({m for points in variants.values() for m in points})
        lines += [f"`{g.label}`: `{prefix}` with each extension applied at evaluation", ""]
        rows = []
        for variant in variants:
            suffix = "" if variant == "base" else f"/{variant}"
            cells = [str(s) if (s := g.stat(f"{prefix}@{m}x{suffix}")) else "—" for m in lengths]
            rows.append(["no scaling" if variant == "base" else variant, *cells])
        lines += [*markdown_table(["extension", *(f"{m}x" for m in lengths)], rows), ""]
    return lines


def depth_tables(groups: Sequence) -> list[str]:
    """Associative recall: encoder x depth bucket of the queried pair, one table per evaluation length."""
    grids = {g.label: grid for g in groups if (grid := depth_accuracy(g))}
    lines = []
    for length in sorted({n for grid in grids.values() for n in grid}):
        depths = sorted({d for grid in grids.values() for d in grid.get(length, {})})
        lines += [f"Recall accuracy by depth of the queried pair (0 = start), {length} tokens:", ""]
        rows = [
            [f"`{label}`", *("—" if grid.get(length, {}).get(d) is None else f"{grid[length][d]:.2f}" for d in depths)]
            for label, grid in grids.items()
        ]
        lines += [*markdown_table(["encoder", *(f"{d:.1f}" for d in depths)], rows), ""]
    return lines


def tables(groups: Sequence) -> list[str]:
    return variant_tables(groups, "lengen/loss") + depth_tables(groups)


def figures(groups: Sequence) -> list:
    return [
        ("lengen_loss", "loss vs evaluation length", lambda: length_curves(groups, "lengen/loss", "loss (nats/char)")),
        ("lengen_acc", "accuracy vs evaluation length", lambda: length_curves(groups, "lengen/acc", "accuracy")),
        ("rope_scaling", "context extensions at evaluation", lambda: scaling_curves(groups, "lengen/loss", "loss")),
        ("recall_depth", "recall accuracy by depth and length", lambda: recall_depth(groups)),
    ]


def overlays(groups: Sequence) -> dict:
    """Every encoder's unscaled length curve in one W&B chart, for loss and accuracy."""
    charts = {}
    for prefix in ("lengen/loss", "lengen/acc"):
        series = {g.label: base for g in groups if (base := multiples(g, prefix).get("base"))}
        if series:
            name = f"compare/{prefix.replace('/', '_')}_overlay"
            charts[name] = (f"{prefix} vs length multiple", "multiple of the training context", series)
    return charts
