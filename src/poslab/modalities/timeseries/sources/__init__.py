"""Time series as arrays: values ``[T, C]``, Unix timestamps ``[T]``, split borders.

* ``taylor`` (default, no network): half-hourly electricity demand in England
  and Wales, Monday 2000-06-05 to 2000-08-27 (Taylor 2003), 4,032 values that
  ``pmdarima.datasets.load_taylor()`` ships; timestamps rebuilt with
  ``pandas.date_range(freq="30min")``. Split chronologically 70 / 10 / 20 %.
* ``etth1`` / ``ettm1`` (Zhou et al. 2021, ETDataset; SHA-256 checked): the
  Informer / Time-Series-Library split of 12 / 4 / 4 months — ETTh1 rows
  [0, 8640), [8640, 11520), [11520, 14400); ETTm1 four times that.

* ``csvfile``: your own CSV (``data.path``) with a ``date`` column and numeric
  columns (the last one is the univariate target), split 70 / 10 / 20 %.

Borders are where each split's *targets* start; a window may look back across
a border (val starts at 8640 − lookback), as in Time-Series-Library.

A module added to this package registers one more source (``make new-dataset``);
``SAMPLES`` writes a tiny copy of each source's files for the tests.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from poslab.data.downloads import dataset_package, fetch, regular_file
from poslab.data.sources import discover
from poslab.errors import DataError, first_line

ETT_URL = "https://raw.githubusercontent.com/zhouhaoyi/ETDataset/main/ETT-small/{name}.csv"
#: sha256 from HF datasets' ett dataset_infos.json (ETTh1 also in ../shared/data/README.md)
ETT_SHA256 = {
    "ETTh1": "f18de3ad269cef59bb07b5438d79bb3042d3be49bdeecf01c1cd6d29695ee066",
    "ETTm1": "6ce1759b1a18e3328421d5d75fadcb316c449fcd7cec32820c8dafda71986c9e",
}
ETT_COLUMNS = ("HUFL", "HULL", "MUFL", "MULL", "LUFL", "LULL", "OT")


@dataclass(frozen=True)
class Series:
    values: np.ndarray  # [T, C] float64
    times: np.ndarray  # [T] int64 Unix seconds
    columns: tuple[str, ...]
    step_seconds: int
    borders: tuple[int, int, int]  # train end, val end, test end (exclusive)


def to_unix_seconds(index) -> np.ndarray:
    """pandas datetimes (any resolution) -> int64 seconds since 1970-01-01 UTC."""
    import pandas as pd  # deferred: pandas, ~0.4 s

    return np.asarray((pd.DatetimeIndex(index) - pd.Timestamp("1970-01-01")) // pd.Timedelta("1s"), dtype=np.int64)


def load_taylor(root: Path, download: bool, path: str | None = None) -> Series:
    import pandas as pd  # deferred: pandas, ~0.4 s

    values = np.asarray(dataset_package("pmdarima.datasets", "taylor").load_taylor(), dtype=np.float64)[:, None]
    times = to_unix_seconds(pd.date_range("2000-06-05 00:00", periods=len(values), freq="30min"))
    n = len(values)
    return Series(values, times, ("demand",), 1800, (int(0.7 * n), int(0.8 * n), n))


def _load_ett(name: str, rows_per_month: int) -> Callable[..., Series]:
    def load(root: Path, download: bool, path: str | None = None) -> Series:
        path = fetch(ETT_URL.format(name=name), Path(root) / f"{name}.csv", ETT_SHA256[name], download)
        series = _read_csv(path, borders_of=lambda n: tuple(m * 30 * rows_per_month for m in (12, 16, 20)))
        if series.columns != ETT_COLUMNS:
            raise DataError(f"{path} has columns {series.columns}, expected {ETT_COLUMNS}")
        return series

    return load


def load_csvfile(root: Path, download: bool, path: str | None = None) -> Series:
    if not path:
        raise DataError("data=csvfile needs data.path=<a CSV with a date column>")
    return _read_csv(regular_file(path), borders_of=lambda n: (int(0.7 * n), int(0.8 * n), n))


def _read_csv(path: Path, borders_of: Callable[[int], tuple[int, int, int]]) -> Series:
    import pandas as pd  # deferred: pandas, ~0.4 s

    try:
        frame = pd.read_csv(path)
        dates = pd.to_datetime(frame.pop("date"))
        values = frame.to_numpy(dtype=np.float64)
    except (OSError, KeyError, ValueError, TypeError) as exc:
        raise DataError(
            f"cannot read {path} as a time series (a 'date' column and numeric columns): {first_line(exc)}"
        ) from None
    # CSV line numbers: the header is line 1, the first row line 2
    if getattr(dates.dt, "tz", None) is not None:
        raise DataError(
            f"{path}, line 2: date {dates.iloc[0]} carries a time zone; poslab reads "
            "wall-clock times: write them without an offset"
        )
    if len(values) < 3 or values.shape[1] == 0:
        raise DataError(f"{path} holds no series")
    bad = ~np.isfinite(values)
    if bad.any():
        row, col = np.argwhere(bad)[0]
        raise DataError(f"{path}, line {row + 2}: column '{frame.columns[col]}' is {values[row, col]} (not a number)")
    times = to_unix_seconds(dates)
    borders = borders_of(len(values))
    if len(values) < borders[-1]:
        raise DataError(f"{path} has {len(values)} rows, fewer than the {borders[-1]} its split needs")
    steps = np.diff(times)
    odd = np.flatnonzero((steps != steps[0]) | (steps <= 0))
    if len(odd) or steps[0] <= 0:
        row = int(odd[0]) + 1 if len(odd) else 1
        raise DataError(
            f"{path}, line {row + 2}: date {dates.iloc[row]} does not follow {dates.iloc[row - 1]} by the series' "
            f"step of {int(steps[0])} s (dates must increase at one regular step)"
        )
    return Series(values, times, tuple(frame.columns), int(steps[0]), borders)


def write_sample_csv(path: Path, rows: int, freq: str, columns: tuple[str, ...] = ("y",), seed: int = 0) -> Path:
    """A daily-periodic series with noise, in the ETT layout (a ``date`` column, then the values)."""
    import pandas as pd  # deferred: pandas, ~0.4 s

    dates = pd.date_range("2016-07-01 00:00", periods=rows, freq=freq)
    rng = np.random.default_rng(seed)
    daily = np.sin(2 * np.pi * (dates.hour + dates.minute / 60) / 24)
    frame = {c: daily + 0.1 * rng.normal(size=rows) for c in columns}
    pd.DataFrame({"date": dates.strftime("%Y-%m-%d %H:%M:%S"), **frame}).to_csv(path, index=False)
    return path


def _sample_ett(name: str, rows_per_month: int, freq: str) -> Callable[[Path], list[str]]:
    def sample(root: Path) -> list[str]:  # the Informer split needs all 20 months
        write_sample_csv(root / f"{name}.csv", 20 * 30 * rows_per_month, freq, ETT_COLUMNS)
        return []

    return sample


SOURCES: dict[str, Callable[..., Series]] = {
    "taylor": load_taylor,
    "etth1": _load_ett("ETTh1", 24),
    "ettm1": _load_ett("ETTm1", 24 * 4),
    "csvfile": load_csvfile,
}
#: name -> ``sample(root)``: writes a tiny copy of what the loader reads into ``root`` (nothing for an
#: embedded series) and returns the config overrides that read it (``data.path=…``), often none.
SAMPLES: dict[str, Callable[[Path], list[str]]] = {
    "taylor": lambda root: [],
    "etth1": _sample_ett("ETTh1", 24, "h"),
    "ettm1": _sample_ett("ETTm1", 24 * 4, "15min"),
    "csvfile": lambda root: [f"data.path={write_sample_csv(root / 'sample.csv', 2_000, 'h')}"],
}
#: What a loader returns and how a new source registers (``make new-dataset`` writes these into its stub).
STUB_IMPORTS = "Series"
RETURNS = "a Series(values [T, C], Unix-second times [T], columns, step_seconds, split borders)"
REGISTER = 'SOURCES["{name}"] = load_{name}'

discover(__name__, __path__)
