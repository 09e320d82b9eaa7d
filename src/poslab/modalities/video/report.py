"""Video report pieces: accuracy on longer clips and larger canvases, raw vs rescaled positions."""

from __future__ import annotations

from collections.abc import Sequence

from poslab.study.report_figures import keyed_means, pyplot

PROBES = (("temporal", "f", "frames"), ("spatial", "px", "canvas (px)"))


def probe_points(group, family: str, unit: str, mode: str) -> dict[int, float]:
    """Test accuracy by clip size with ``mode`` positions, the training size included; {} if not measured."""
    points = keyed_means(group, rf"{family}/acc@(\d+){unit}/{mode}")
    base = group.stat("test/acc")
    if not points or base is None:
        return {}
    data = group.runs[0]["config"]["data"]
    trained = data["frames"] if family == "temporal" else data["canvas"]
    return dict(sorted({trained: base.mean, **points}.items()))


def probes(groups: Sequence):
    """One panel per probe: solid lines rescaled positions, dashed raw."""
    present = [p for p in PROBES if any(probe_points(g, p[0], p[1], m) for g in groups for m in ("raw", "rescaled"))]
    if not present:
        return None
    fig, axes = pyplot().subplots(1, len(present), figsize=(5.6 * len(present), 4.0), squeeze=False)
    for ax, (family, unit, xlabel) in zip(axes[0], present, strict=True):
        for index, g in enumerate(groups):
            color = f"C{index % 10}"
            for mode, style in (("rescaled", "-"), ("raw", "--")):
                points = probe_points(g, family, unit, mode)
                if points:
                    label = g.label if mode == "rescaled" else None
                    ax.plot(list(points), list(points.values()), style, color=color, marker="o", label=label)
        ax.set(xlabel=xlabel, ylabel="test accuracy", ylim=(0, 1.02), title=f"{family}: rescaled (solid) vs raw")
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def figures(groups: Sequence) -> list:
    return [("probes", "accuracy on longer clips and larger canvases", lambda: probes(groups))]


def overlays(groups: Sequence) -> dict:
    charts = {}
    for family, unit, xlabel in PROBES:
        for mode in ("rescaled", "raw"):
            series = {g.label: points for g in groups if (points := probe_points(g, family, unit, mode))}
            if series:
                charts[f"compare/{family}_{mode}_overlay"] = (f"accuracy vs {xlabel} ({mode})", xlabel, series)
    return charts
