"""The long-term forecasting table: poslab's rows (means over seeds, then over the horizons) beside the published
rows of the same dataset and lookback, every published number with its source."""

from __future__ import annotations

import csv
import statistics
from collections import defaultdict
from types import SimpleNamespace

import pytest

from poslab.modalities.timeseries.protocol import PUBLISHED, published, tables

DATASETS = ("etth1", "etth2", "ettm1", "ettm2", "weather", "electricity", "traffic", "exchange")


def rows() -> list[dict]:
    with open(PUBLISHED, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_every_published_number_has_its_source_and_each_average_is_the_mean_of_its_horizons():
    table = rows()
    assert all(r["source"].strip() and float(r["mse"]) > 0 and float(r["mae"]) > 0 for r in table)
    cells = defaultdict(dict)
    for r in table:
        cells[(r["dataset"], int(r["lookback"]), r["model"])][r["horizon"]] = (float(r["mse"]), float(r["mae"]))
    models = ("PatchTST", "iTransformer", "DLinear", "TimesNet")
    assert {k for k in cells if k[1] == 96} == {(d, 96, m) for d in DATASETS for m in models}
    assert {k for k in cells if k[1] != 96} == {("ili", 36, "TimesNet"), ("ili", 36, "DLinear")}
    for key, by_horizon in cells.items():
        horizons = [h for h in by_horizon if h != "avg"]
        assert len(horizons) == 4 and "avg" in by_horizon, key
        for i in (0, 1):  # the papers round each cell to 3 decimals: their averages agree within 0.0006
            assert statistics.fmean(by_horizon[h][i] for h in horizons) == pytest.approx(by_horizon["avg"][i], abs=6e-4)
    # the numbers the protocol's expectations are stated against (iTransformer's Table 10; TimesNet's Table 2)
    assert cells[("etth1", 96, "PatchTST")]["avg"] == (0.469, 0.454)
    assert cells[("ili", 36, "TimesNet")]["avg"] == (2.139, 0.931) and cells[("ili", 36, "DLinear")]["avg"] == (
        2.616,
        1.090,
    )


def run(encoder: str, horizon: int, mse: float, mae: float, name: str = "etth1", lookback: int = 96) -> dict:
    return {"config": {"data": {"name": name, "lookback": lookback, "horizon": horizon}},
            "metrics": {"test/mse": mse, "test/mae": mae}}  # fmt: skip


def group(encoder: str, *runs: dict) -> SimpleNamespace:
    return SimpleNamespace(encoder=encoder, runs=list(runs))


def test_the_table_averages_seeds_then_horizons_and_prints_the_published_rows_with_their_sources():
    groups = [  # two seeds at each horizon: one group per (encoder, horizon variant), as a comparison groups them
        group("rope", run("rope", 96, 0.40, 0.41), run("rope", 96, 0.42, 0.43)),
        group("rope", run("rope", 192, 0.44, 0.45), run("rope", 192, 0.46, 0.47)),
        group("cyclic", run("cyclic", 96, 0.38, 0.40)),
    ]
    lines = tables(groups)
    header = next(line for line in lines if line.startswith("| model"))
    assert header == "| model | MSE 96 | MAE 96 | MSE 192 | MAE 192 | MSE mean | MAE mean | source |"
    rope = next(line for line in lines if line.startswith("| `rope`"))
    assert rope == "| `rope` | 0.410 | 0.420 | 0.450 | 0.460 | 0.430 | 0.440 | poslab |"
    cyclic = next(line for line in lines if line.startswith("| `cyclic`"))
    assert cyclic == "| `cyclic` | 0.380 | 0.400 | — | — | — | — | poslab |"  # no mean without every horizon
    patchtst = next(line for line in lines if line.startswith("| PatchTST"))
    assert patchtst == "| PatchTST | 0.414 | 0.419 | 0.460 | 0.445 | 0.437 | 0.432 | [1] |"  # over the same two
    every = [group("rope", run("rope", h, 0.5, 0.5)) for h in (96, 192, 336, 720)]
    published_mean = next(line for line in tables(every) if line.startswith("| PatchTST"))
    assert published_mean.endswith("| 0.469 | 0.454 | [1] |")  # all four horizons: the mean the paper prints
    assert "[1] Liu et al. 2024, iTransformer (ICLR), Table 10: lookback 96" in lines


def test_no_table_from_one_horizon_and_none_of_another_lookbacks_published_rows():
    assert tables([group("rope", run("rope", 96, 0.4, 0.4))]) == []
    lines = tables([group("rope", run("rope", 96, 0.4, 0.4, lookback=336), run("rope", 192, 0.5, 0.5, lookback=336))])
    assert any(line.startswith("| `rope`") for line in lines) and not any("PatchTST" in line for line in lines)
    assert published("ili", 36)[0].model == "TimesNet" and published("ili", 96) == []


def test_the_w_and_b_report_run_gets_the_same_table_with_numbers_and_its_sources_written_out():
    from poslab.study.compare import modality_data

    every = [group("rope", run("rope", h, 0.5, 0.25)) for h in (96, 192, 336, 720)]
    for g in every:
        g.modality = "timeseries"
    ((key, (columns, table_rows)),) = modality_data(every).items()
    assert key == "compare/protocol/etth1@96" and columns[:3] == ["model", "MSE 96", "MAE 96"]
    assert columns[-3:] == ["MSE mean", "MAE mean", "source"]
    assert table_rows[0] == ["rope", *[0.5, 0.25] * 4, 0.5, 0.25, "poslab"]
    patchtst = next(r for r in table_rows if r[0] == "PatchTST")
    assert patchtst[-3:] == [0.469, 0.454, "Liu et al. 2024, iTransformer (ICLR), Table 10: lookback 96"]
    vision = SimpleNamespace(modality="vision", encoder="none", runs=[])
    assert modality_data([vision]) == {}  # a modality without tables of its own logs none
