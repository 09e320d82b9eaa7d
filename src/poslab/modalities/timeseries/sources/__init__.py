"""Time series as arrays: values ``[T, C]``, Unix timestamps ``[T]``, split borders.

* ``taylor`` (default, no network): half-hourly electricity demand in England
  and Wales, Monday 2000-06-05 to 2000-08-27 (Taylor 2003), 4,032 values that
  ``pmdarima.datasets.load_taylor()`` ships; timestamps rebuilt with
  ``pandas.date_range(freq="30min")``. Split chronologically 70 / 10 / 20 %.
* ``etth1`` / ``etth2`` / ``ettm1`` / ``ettm2`` (Zhou et al. 2021, ETDataset;
  SHA-256 checked): the Informer / Time-Series-Library split of 12 / 4 / 4
  months — ETTh rows [0, 8640), [8640, 11520), [11520, 14400); ETTm four
  times that.
* ``weather``, ``electricity``, ``traffic``, ``exchange``, ``ili``: the rest of
  Time-Series-Library's long-term benchmark (:mod:`.tslib`).
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
#: Time-Series-Library's copy of every benchmark file (its README, "Prepare Data"): the mirror after ETDataset.
TSLIB_URL = "https://huggingface.co/datasets/thuml/Time-Series-Library/resolve/main/{file}"
#: ETDataset publishes no checksum. ETTh1, ETTm1: HF datasets' ett dataset_infos.json (ETTh1 also in
#: ../shared/data/README.md); ETTh2: computed from ETDataset's git object (blob 6e37607…), with the copy
#: with CRLF line ends; ETTm2: recorded by third-party download scripts for ETDataset's and the HF copy, with
#: its CRLF copy.
ETT_SHA256 = {
    "ETTh1": "f18de3ad269cef59bb07b5438d79bb3042d3be49bdeecf01c1cd6d29695ee066",
    "ETTm1": "6ce1759b1a18e3328421d5d75fadcb316c449fcd7cec32820c8dafda71986c9e",
    "ETTh2": ("a3dc2c597b9218c7ce1cd55eb77b283fd459a1d09d753063f944967dd6b9218b",
              "ae5c99b925fb8b4e77d1bd6a897b311d1167766076f3d00e14a8654de38e7468"),
    "ETTm2": ("db973ca252c6410a30d0469b13d696cf919648d0f3fd588c60f03fdbdbadd1fd",
              "fa470b4ffeac8f96f325abf027fe1c3cad1149560eabffc6d254abb72de21a62"),
}  # fmt: skip
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
        urls = (ETT_URL.format(name=name), TSLIB_URL.format(file=f"ETT-small/{name}.csv"))
        path = fetch(urls, Path(root) / f"{name}.csv", ETT_SHA256[name], download)
        return read_csv(path, lambda n: tuple(m * 30 * rows_per_month for m in (12, 16, 20)), ETT_COLUMNS)

    return load


def load_csvfile(root: Path, download: bool, path: str | None = None) -> Series:
    if not path:
        raise DataError("data=csvfile needs data.path=<a CSV with a date column>")
    return read_csv(regular_file(path), lambda n: (int(0.7 * n), int(0.8 * n), n))


def read_csv(
    path: Path,
    borders_of: Callable[[int], tuple[int, int, int]],
    columns: tuple[str, ...] | None = None,
    regular: bool = True,
) -> Series:
    """A ``date`` column and numeric ones; with ``columns``, exactly those after ``date`` (compared without their
    non-ASCII characters, which some copies encode otherwise); ``regular``: dates one step apart, else only
    increasing (the series' step is then the commonest one)."""
    import pandas as pd  # deferred: pandas, ~0.4 s

    try:
        try:
            frame = pd.read_csv(path)
        except UnicodeDecodeError:  # Time-Series-Library's weather.csv writes ² and µ in Latin-1
            frame = pd.read_csv(path, encoding="latin-1")
        written = frame.pop("date")
        dates = pd.to_datetime(written, errors="coerce")
        if columns is not None:
            check_columns(path, tuple(frame.columns), columns)
        values = frame.to_numpy(dtype=np.float64)
    except (OSError, KeyError, ValueError, TypeError) as exc:
        raise DataError(
            f"cannot read {path} as a time series (a 'date' column and numeric columns): {first_line(exc)}"
        ) from None
    # CSV line numbers: the header is line 1, the first row line 2
    if dates.isna().any():
        row = int(np.flatnonzero(dates.isna().to_numpy())[0])
        raise DataError(f"{path}, line {row + 2}: date {written.iloc[row]!r} does not parse")
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
    if not regular:
        odd = np.flatnonzero(steps <= 0)
        if len(odd):
            row = int(odd[0]) + 1
            raise DataError(f"{path}, line {row + 2}: date {dates.iloc[row]} does not follow {dates.iloc[row - 1]} "
                            "(dates must increase)")  # fmt: skip
        common, counts = np.unique(steps, return_counts=True)
        return Series(values, times, tuple(frame.columns), int(common[counts.argmax()]), borders)
    odd = np.flatnonzero((steps != steps[0]) | (steps <= 0))
    if len(odd) or steps[0] <= 0:
        row = int(odd[0]) + 1 if len(odd) else 1
        raise DataError(
            f"{path}, line {row + 2}: date {dates.iloc[row]} does not follow {dates.iloc[row - 1]} by the series' "
            f"step of {int(steps[0])} s (dates must increase at one regular step)"
        )
    return Series(values, times, tuple(frame.columns), int(steps[0]), borders)


def check_columns(path: Path, got: tuple[str, ...], expected: tuple[str, ...]) -> None:
    """``got`` (after ``date``) must be ``expected``, in order: else one line naming what is missing or extra."""

    def plain(name: str) -> str:
        return name.encode("ascii", "ignore").decode()

    if tuple(map(plain, got)) == tuple(map(plain, expected)):
        return
    missing = [c for c in expected if plain(c) not in set(map(plain, got))]
    extra = [c for c in got if plain(c) not in set(map(plain, expected))]
    said = [f"missing column(s) {', '.join(map(repr, missing[:3]))}" if missing else "",
            f"unexpected column(s) {', '.join(map(repr, extra[:3]))}" if extra else ""]  # fmt: skip
    why = "; ".join(s for s in said if s) or "columns out of order"
    raise DataError(f"{path}: {why}; expected {len(expected)} columns after 'date': {expected[0]}, …, {expected[-1]}")


def write_sample_csv(
    path: Path,
    rows: int,
    freq: str,
    columns: tuple[str, ...] = ("y",),
    seed: int = 0,
    start: str = "2016-07-01 00:00",
    date_format: Callable | str = "%Y-%m-%d %H:%M:%S",
    encoding: str = "utf-8",
    float_format: str | None = None,
) -> Path:
    """A daily-periodic series with noise, in the ETT layout (a ``date`` column, then the values); ``date_format``
    a strftime pattern or a function of the ``DatetimeIndex`` giving the strings."""
    import pandas as pd  # deferred: pandas, ~0.4 s

    dates = pd.date_range(start, periods=rows, freq=freq)
    rng = np.random.default_rng(seed)
    daily = np.sin(2 * np.pi * (dates.hour + dates.minute / 60) / 24)
    frame = {c: daily + 0.1 * rng.normal(size=rows) for c in columns}
    written = dates.strftime(date_format) if isinstance(date_format, str) else date_format(dates)
    pd.DataFrame({"date": written, **frame}).to_csv(path, index=False, encoding=encoding, float_format=float_format)
    return path


def _sample_ett(name: str, rows_per_month: int, freq: str) -> Callable[[Path], list[str]]:
    def sample(root: Path) -> list[str]:  # the Informer split needs all 20 months
        write_sample_csv(root / f"{name}.csv", 20 * 30 * rows_per_month, freq, ETT_COLUMNS)
        return []

    return sample


SOURCES: dict[str, Callable[..., Series]] = {
    "taylor": load_taylor,
    "etth1": _load_ett("ETTh1", 24),
    "etth2": _load_ett("ETTh2", 24),
    "ettm1": _load_ett("ETTm1", 24 * 4),
    "ettm2": _load_ett("ETTm2", 24 * 4),
    "csvfile": load_csvfile,
}
#: name -> ``sample(root)``: writes a tiny copy of what the loader reads into ``root`` (nothing for an
#: embedded series) and returns the config overrides that read it (``data.path=…``), often none.
SAMPLES: dict[str, Callable[[Path], list[str]]] = {
    "taylor": lambda root: [],
    "etth1": _sample_ett("ETTh1", 24, "h"),
    "etth2": _sample_ett("ETTh2", 24, "h"),
    "ettm1": _sample_ett("ETTm1", 24 * 4, "15min"),
    "ettm2": _sample_ett("ETTm2", 24 * 4, "15min"),
    "csvfile": lambda root: [f"data.path={write_sample_csv(root / 'sample.csv', 2_000, 'h')}"],
}
#: What a loader returns and how a new source registers (``make new-dataset`` writes these into its stub).
STUB_IMPORTS = "Series"
RETURNS = "a Series(values [T, C], Unix-second times [T], columns, step_seconds, split borders)"
REGISTER = 'SOURCES["{name}"] = load_{name}'

discover(__name__, __path__)
