"""Vision report pieces: accuracy against image size, raw and rescaled coordinates."""

from __future__ import annotations

from collections.abc import Sequence

from poslab.study.report_figures import keyed_means, pyplot


def training_size(config: dict) -> int:
    from poslab.modalities.vision.data import native_size  # deferred: torchvision, ~4.6 s

    return config["data"].get("image_size") or native_size(config["data"])


def accuracy_by_size(group, mode: str) -> dict[int, float]:
    """Test accuracy by image size with ``mode`` coordinates, the training size included; {} if not measured."""
    points = keyed_means(group, rf"resolution/acc@(\d+)/{mode}")  # x = image size; mode = raw | rescaled
    base = group.stat("test/acc")
    if not points or base is None:
        return {}
    return dict(sorted({training_size(group.runs[0]["config"]): base.mean, **points}.items()))


def resolution(groups: Sequence):
    """Accuracy against image size: solid lines rescaled coordinates, dashed raw patch indices."""
    plt = pyplot()
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


def figures(groups: Sequence) -> list:
    return [("resolution", "accuracy vs image size", lambda: resolution(groups))]


def overlays(groups: Sequence) -> dict:
    charts = {}
    for mode, name in (("rescaled", "rescaled"), ("raw", "raw indices")):
        series = {g.label: points for g in groups if (points := accuracy_by_size(g, mode))}
        if series:
            charts[f"compare/resolution_{mode}_overlay"] = (
                f"accuracy vs image size ({name})",
                "image size (px)",
                series,
            )
    return charts
