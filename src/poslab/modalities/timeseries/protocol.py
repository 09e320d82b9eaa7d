"""The long-term forecasting table of Time-Series-Library's protocol: one row per encoder, MSE and MAE at each
horizon and their mean over the horizons (a row of the table every forecasting paper reprints), with the
published rows for the same dataset and lookback beside poslab's.

The published numbers are data (``published.csv``: dataset, lookback, horizon, model, mse, mae, and the source
of every number), not code: the iTransformer paper's Table 10 (Liu et al. 2024, lookback 96, where its PatchTST,
DLinear and TimesNet rows follow TimesNet's setting) and, for ILI at lookback 36, TimesNet's (Wu et al. 2023).
"""

from __future__ import annotations

import csv
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from poslab.track.tables import markdown_table

PUBLISHED = Path(__file__).with_name("published.csv")
AVERAGE = "avg"


@dataclass(frozen=True)
class Published:
    model: str
    source: str
    scores: dict[str, tuple[float, float]]  # horizon (or "avg") -> (MSE, MAE)


def published(dataset: str, lookback: int, path: Path = PUBLISHED) -> list[Published]:
    """The published rows for ``dataset`` at ``lookback``, in the file's order of models."""
    models: dict[str, Published] = {}
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            if row["dataset"] == dataset and int(row["lookback"]) == lookback:
                found = models.setdefault(row["model"], Published(row["model"], row["source"], {}))
                found.scores[row["horizon"]] = (float(row["mse"]), float(row["mae"]))
    return list(models.values())


def measured(groups: Sequence) -> dict[tuple[str, int], dict[str, dict[int, tuple[float, float]]]]:
    """(dataset, lookback) -> encoder -> horizon -> (mean test MSE, mean test MAE) over its seeds, from every run
    that reports both (an encoder's horizons are its variants' runs)."""
    scores: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(lambda: ([], []))))
    for group in groups:
        for run in group.runs:
            data, metrics = run["config"].get("data", {}), run["metrics"]
            if "test/mse" in metrics and "test/mae" in metrics and "horizon" in data:
                mse, mae = scores[(data["name"], int(data["lookback"]))][group.encoder][int(data["horizon"])]
                mse.append(metrics["test/mse"])
                mae.append(metrics["test/mae"])
    return {
        key: {enc: {h: (statistics.fmean(a), statistics.fmean(b)) for h, (a, b) in sorted(hs.items())}
              for enc, hs in encoders.items()}
        for key, encoders in scores.items()
    }  # fmt: skip


@dataclass(frozen=True)
class ProtocolTable:
    """One dataset and lookback: per row a model, MSE and MAE at each horizon then their means, and its source
    (``poslab``, or the index of a published source in ``sources``)."""

    dataset: str
    lookback: int
    horizons: list[int]
    rows: list[tuple[str, list[float | None], str]]
    sources: list[str]

    @property
    def header(self) -> list[str]:
        return ["model", *(f"{name} {h}" for h in self.horizons for name in ("MSE", "MAE")), "MSE mean", "MAE mean",
                "source"]  # fmt: skip


def protocol_tables(groups: Sequence) -> list[ProtocolTable]:
    """The protocol's table for each dataset and lookback where an encoder ran at two horizons or more."""
    found = []
    for (dataset, lookback), encoders in measured(groups).items():
        horizons = sorted({h for hs in encoders.values() for h in hs})
        if len(horizons) < 2:
            continue
        rows = [(encoder, values(scores, horizons), "poslab") for encoder, scores in encoders.items()]
        sources: list[str] = []
        for row in published(dataset, lookback):
            if row.source not in sources:
                sources.append(row.source)
            scores = {int(h): v for h, v in row.scores.items() if h != AVERAGE}
            average = row.scores.get(AVERAGE) if set(scores) == set(horizons) else None  # else over these horizons
            rows.append((row.model, values(scores, horizons, average), f"[{sources.index(row.source) + 1}]"))
        found.append(ProtocolTable(dataset, lookback, horizons, rows, sources))
    return found


def values(scores: dict[int, tuple[float, float]], horizons: list[int], average=None) -> list[float | None]:
    """MSE and MAE at each horizon, then their means over the horizons (``average`` where it is published; none
    unless every horizon is there)."""
    out = [scores[h][i] if h in scores else None for h in horizons for i in (0, 1)]
    if average is None and all(h in scores for h in horizons):
        average = tuple(statistics.fmean(scores[h][i] for h in horizons) for i in (0, 1))
    return out + (list(average) if average else [None, None])


def tables(groups: Sequence) -> list[str]:
    """The report's Markdown: each table, its title and its sources."""
    lines: list[str] = []
    for table in protocol_tables(groups):
        title = (f"Long-term forecasting, {table.dataset} at lookback {table.lookback} (Time-Series-Library's "
                 "protocol): test MSE and MAE, standardised, means over seeds, then over horizons")  # fmt: skip
        rows = [[f"`{model}`" if source == "poslab" else model, *("—" if v is None else f"{v:.3f}" for v in cells),
                 source] for model, cells, source in table.rows]  # fmt: skip
        lines += ["", title, "", *markdown_table(table.header, rows), ""]
        lines += [*(f"[{i}] {source}" for i, source in enumerate(table.sources, 1)), ""]
    return lines


def data(groups: Sequence) -> dict[str, tuple[list[str], list[list]]]:
    """The tables for the W&B report run: ``compare/protocol/<dataset>@<lookback>`` -> (columns, rows), the
    sources written out."""
    found = {}
    for table in protocol_tables(groups):
        rows = [[model, *cells, source if source == "poslab" else table.sources[int(source[1:-1]) - 1]]
                for model, cells, source in table.rows]  # fmt: skip
        found[f"compare/protocol/{table.dataset}@{table.lookback}"] = (table.header, rows)
    return found
