"""Matplotlib figures a run saves as PNG and logs to the experiment tracker."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402


def similarity_figure(scores: torch.Tensor, grid: tuple[int, int] | None, title: str) -> Figure:
    """Heatmap of ``[L, L]`` position scores, plus the centre token's row on the patch grid."""
    panels = 2 if grid else 1
    fig, axes = plt.subplots(1, panels, figsize=(5.2 * panels, 4.4), squeeze=False)
    ax = axes[0, 0]
    im = ax.imshow(scores.numpy(), cmap="viridis")
    ax.set(title="score(i, j) from position alone", xlabel="key token j", ylabel="query token i")
    fig.colorbar(im, ax=ax, fraction=0.046)
    if grid:
        gh, gw = grid
        centre = (gh // 2) * gw + gw // 2
        ax = axes[0, 1]
        im = ax.imshow(scores[centre].reshape(gh, gw).numpy(), cmap="viridis")
        ax.plot([gw // 2], [gh // 2], marker="x", color="red")
        ax.set(title=f"score(centre patch, j) on the {gh}x{gw} grid", xlabel="column", ylabel="row")
        fig.colorbar(im, ax=ax, fraction=0.046)
    for ax in axes.flat:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def per_class_figure(names: Sequence[str], values: Sequence[float], title: str) -> Figure:
    fig, ax = plt.subplots(figsize=(max(4.0, 0.55 * len(names)), 3.4))
    ax.bar(range(len(names)), values, color="tab:blue")
    ax.set_xticks(range(len(names)), names, rotation=45 if max(map(len, names)) > 3 else 0, ha="right")
    ax.set(ylim=(0, 1), ylabel="accuracy", title=title)
    for i, v in enumerate(values):
        ax.text(i, v + 0.01, f"{v:.2f}", ha="center", fontsize=8)
    fig.tight_layout()
    return fig


def save_figure(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def close(fig: Figure) -> None:
    plt.close(fig)


def length_figure(lengths: Sequence[int], series: dict, metric: str, context: int, title: str) -> Figure:
    """Metric against evaluation length, one line per variant; the training length marked."""
    fig, ax = plt.subplots(figsize=(6.0, 4.0))
    for name, values in series.items():
        points = [(x, y) for x, y in zip(lengths, values, strict=True) if y is not None]
        if points:
            ax.plot(*zip(*points, strict=True), marker="o", label=name)
    ax.axvline(context, color="grey", linestyle=":", label="training length")
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(lengths), [str(x) for x in lengths])
    ax.set(xlabel="evaluation length (tokens)", ylabel=metric, title=title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def depth_heatmap(lengths: Sequence[int], grid: Sequence[Sequence[float | None] | None], title: str) -> Figure:
    """Rows: evaluation lengths; columns: depth buckets of the queried item (start -> end)."""
    fig, ax = plt.subplots(figsize=(6.4, 0.5 * len(lengths) + 1.6))
    im = draw_depth_heatmap(ax, lengths, grid, title)
    fig.colorbar(im, ax=ax, fraction=0.046, label="accuracy")
    fig.tight_layout()
    return fig


def draw_depth_heatmap(ax, lengths: Sequence[int], grid: Sequence[Sequence[float | None] | None], title: str):
    """One accuracy-by-depth panel on ``ax`` (missing buckets blank); returns the image for a colorbar."""

    buckets = len(next(g for g in grid if g))
    values = np.array([[np.nan if not g or g[b] is None else g[b] for b in range(buckets)] for g in grid])
    im = ax.imshow(values, vmin=0, vmax=1, cmap="magma", aspect="auto")
    ax.set_yticks(range(len(lengths)), [str(n) for n in lengths])
    ax.set_xticks(range(buckets), [f"{b / buckets:.1f}" for b in range(buckets)])
    ax.set(xlabel="depth of the queried pair (0 = start)", ylabel="sequence length", title=title)
    return im


def weekday_hour_heatmap(grid, weekday_names: Sequence[str], title: str) -> Figure:
    """``[7, 24]`` mean error per (weekday, hour) of the forecast target."""
    fig, ax = plt.subplots(figsize=(9.0, 3.4))
    im = ax.imshow(grid.numpy(), cmap="viridis", aspect="auto")
    ax.set_yticks(range(7), list(weekday_names))
    ax.set_xticks(range(0, 24, 2), [str(h) for h in range(0, 24, 2)])
    ax.set(xlabel="hour of day", title=title)
    fig.colorbar(im, ax=ax, fraction=0.03, label="MSE")
    fig.tight_layout()
    return fig
