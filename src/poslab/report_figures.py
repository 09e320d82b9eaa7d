"""The report's figures, drawn from the seed-aggregated groups of :mod:`poslab.report`.

Each function returns a matplotlib figure or ``None`` when the runs hold
nothing to draw, so a report shows exactly the curves its runs measured:
loss against evaluation length (and per RoPE extension) for text, recall
accuracy by depth and length for associative recall, accuracy
against image size with raw and rescaled coordinates for vision, MSE against
horizon / lookback and under irregular sampling for time series, and the
training curves of every modality.
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from collections.abc import Iterator, Sequence
from typing import Any

#: The validation metric a modality's training curve shows, in order of preference.
VAL_CURVE = ("val/loss", "val/mse", "val/acc")


def _plt():
    from poslab import plots

    return plots.plt


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
    fig, ax = _plt().subplots(figsize=(6.4, 4.0))
    _length_panel(ax, data, label, f"{label} vs evaluation length")
    fig.tight_layout()
    return fig


def scaling_curves(groups: Sequence, prefix: str, label: str):
    """One panel per encoder that has evaluation-time extensions (RoPE: PI, NTK, dynamic, YaRN)."""
    data = {g.label: multiples(g, prefix) for g in groups}
    data = {k: v for k, v in data.items() if len(v) > 1}
    if not data:
        return None
    fig, axes = _plt().subplots(1, len(data), figsize=(6.4 * len(data), 4.0), squeeze=False)
    for ax, (encoder, variants) in zip(axes[0], data.items(), strict=True):
        named = {("no scaling" if v == "base" else v): points for v, points in variants.items()}
        title = f"{encoder}: context extensions applied at evaluation"
        _length_panel(ax, named, label, title, styles={"no scaling": {"color": "black", "linewidth": 2}})
    fig.tight_layout()
    return fig


def training_size(config: dict) -> int:
    from poslab.data.vision import native_size

    return config["data"].get("image_size") or native_size(config["data"])


#: Per-bucket test MSE keys; the captured x is the bucket's last forecast step.
HORIZON_BUCKETS = r"test/mse@h\d+-(\d+)"


def keyed_means(group, pattern: str) -> dict[int, float]:
    """x (the pattern's first group) -> mean over seeds, for every metric matching ``pattern``; sorted by x."""
    points = {}
    for key in {k for r in group.runs for k in r["metrics"]}:
        match = re.fullmatch(pattern, key)
        if match and (s := group.stat(key)) is not None:
            points[int(match.group(1))] = s.mean
    return dict(sorted(points.items()))


def accuracy_by_size(group, mode: str) -> dict[int, float]:
    """Test accuracy by image size with ``mode`` coordinates, the training size included; {} if not measured."""
    points = keyed_means(group, rf"resolution/acc@(\d+)/{mode}")  # x = image size; mode = raw | rescaled
    base = group.stat("test/acc")
    if not points or base is None:
        return {}
    return dict(sorted({training_size(group.runs[0]["config"]): base.mean, **points}.items()))


def resolution(groups: Sequence):
    """Accuracy against image size: solid lines rescaled coordinates, dashed raw patch indices."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    drawn = False
    for index, g in enumerate(groups):
        color = f"C{index % 10}"
        for mode, style in (("rescaled", "-"), ("raw", "--")):
            points = accuracy_by_size(g, mode)
            if points:
                drawn = True
                ax.plot(
                    list(points), list(points.values()), style, marker="o", color=color, label=f"{g.label} ({mode})"
                )
    if not drawn:
        plt.close(fig)
        return None
    ax.set(xlabel="image size at evaluation (px)", ylabel="test accuracy", ylim=(0, 1.02))
    ax.set_title("accuracy vs image size: rescaled (solid) vs raw (dashed) coordinates")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig


def forecast(groups: Sequence):
    """Time series: MSE by horizon step, beyond the training horizon / lookback, and under irregular sampling."""
    plt = _plt()
    rows = [(g, keyed_means(g, HORIZON_BUCKETS)) for g in groups]
    if not any(buckets for _, buckets in rows):
        return None
    extrap = any(g.stat("extrap/mse@2xH") or g.stat("extrap/mse@2xL") for g in groups)
    panels = 3 if extrap else 2
    fig, axes = plt.subplots(1, panels, figsize=(5.0 * panels, 4.0))
    for g, buckets in rows:
        if buckets:
            axes[0].plot(list(buckets), list(buckets.values()), marker="o", label=g.label)
    for key, name, style in (("baseline/linear_mse", "linear baseline", ":"), ("baseline/seasonal_naive_week_mse",
                             "seasonal naive (week)", "--")):  # fmt: skip
        if (s := groups[0].stat(key)) is not None:  # the same test windows for every run
            axes[0].axhline(s.mean, color="gray", linestyle=style, label=f"{name} (whole horizon)")
    axes[0].set(xlabel="forecast step (end of bucket)", ylabel="test MSE", title="MSE by horizon step")
    axes[0].legend(fontsize=7)
    labels = [g.label for g in groups]
    clean = [s.mean if (s := g.stat("test/mse")) else float("nan") for g in groups]
    dropped = [s.mean if (s := g.stat("probe/irregular_mse")) else float("nan") for g in groups]
    x = range(len(groups))
    axes[1].bar([i - 0.2 for i in x], clean, width=0.4, label="regular")
    axes[1].bar([i + 0.2 for i in x], dropped, width=0.4, label="20 % of past steps dropped")
    axes[1].set_xticks(list(x), labels, rotation=45, ha="right", fontsize=7)
    axes[1].set_yscale("log")
    axes[1].set(ylabel="test MSE", title="irregular-sampling probe")
    axes[1].legend(fontsize=7)
    if extrap:
        for g in groups:
            base = g.stat("test/mse")
            for key, style, name in (("extrap/mse@2xH", "-", "2x horizon"), ("extrap/mse@2xL", "--", "2x lookback")):
                s = g.stat(key)
                if base and s:
                    axes[2].plot([1, 2], [base.mean, s.mean], style, marker="o", label=f"{g.label} {name}")
        axes[2].set(xlabel="multiple of the training size", ylabel="test MSE", xticks=[1, 2])
        axes[2].set_title("beyond training (query layout)")
        axes[2].legend(fontsize=7)
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
    from poslab import plots

    data = {g.label: grid for g in groups if (grid := depth_accuracy(g))}
    if not data:
        return None
    lengths = sorted({n for grid in data.values() for n in grid})  # shared rows: panels share the y axis
    depths = sorted({d for grid in data.values() for row in grid.values() for d in row})
    fig, axes = _plt().subplots(
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
    fig, axes = _plt().subplots(1, len(keys), figsize=(5.6 * len(keys), 4.0), squeeze=False)
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
    """(file stem, caption, figure) for everything these runs can show."""
    candidates = [
        ("lengen_loss", "loss vs evaluation length", lambda: length_curves(groups, "lengen/loss", "loss (nats/char)")),
        ("lengen_acc", "accuracy vs evaluation length", lambda: length_curves(groups, "lengen/acc", "accuracy")),
        ("rope_scaling", "context extensions at evaluation", lambda: scaling_curves(groups, "lengen/loss", "loss")),
        ("recall_depth", "recall accuracy by depth and length", lambda: recall_depth(groups)),
        ("resolution", "accuracy vs image size", lambda: resolution(groups)),
        ("forecast", "forecast error by horizon and under irregular sampling", lambda: forecast(groups)),
        ("training", "training curves", lambda: training_curves(groups)),
    ]
    for stem, caption, draw in candidates:
        fig = draw()
        if fig is not None:
            yield stem, caption, fig
