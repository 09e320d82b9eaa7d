"""Time-series report pieces: error by horizon step, beyond training, under irregular sampling."""

from __future__ import annotations

from collections.abc import Sequence

from poslab.study.report_figures import keyed_means, pyplot

#: Per-bucket test MSE keys; the captured x is the bucket's last forecast step.
HORIZON_BUCKETS = r"test/mse@h\d+-(\d+)"


def forecast(groups: Sequence):
    """Time series: MSE by horizon step, beyond the training horizon / lookback, and under irregular sampling."""
    plt = pyplot()
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


def figures(groups: Sequence) -> list:
    return [("forecast", "forecast error by horizon and under irregular sampling", lambda: forecast(groups))]


def overlays(groups: Sequence) -> dict:
    series = {g.label: points for g in groups if (points := keyed_means(g, HORIZON_BUCKETS))}
    return {"compare/mse_by_horizon_overlay": ("test MSE by horizon step", "forecast step", series)} if series else {}
