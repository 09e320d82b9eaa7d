"""The rest of Time-Series-Library's long-term forecasting benchmark (thuml/Time-Series-Library,
``data_provider/data_loader.py``, ``Dataset_Custom``): Weather, Electricity (ECL), Traffic, Exchange and ILI, read
as TSLib reads them:

* every column after ``date`` a variable, ``OT`` the last (multivariate → multivariate);
* 70 % / the rest / 20 % of the rows, ``int()`` truncating (train ``int(0.7 n)`` rows, test ``int(0.2 n)``, the
  validation the remainder), the validation and test windows looking back across their border;
* standardised with the training rows' statistics (the data module does, for every source).

The files are Time-Series-Library's copies on Hugging Face (its README, "Prepare Data"), kept in ``data.root``
under their own names. No maintainer publishes a checksum: Exchange's and ILI's SHA-256 are computed from the
files (their copies with LF and with CRLF line ends, the latter Hugging Face's); Weather's, Electricity's and
Traffic's are those third-party download scripts record for the Hugging Face copies. Their dates are only
required to increase (Weather's 10-minute rows skip a few steps); the step is the commonest one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from poslab.data.downloads import fetch
from poslab.modalities.timeseries.sources import SAMPLES, SOURCES, TSLIB_URL, Series, read_csv, write_sample_csv

WEATHER_COLUMNS = ("p (mbar)", "T (degC)", "Tpot (K)", "Tdew (degC)", "rh (%)", "VPmax (mbar)", "VPact (mbar)",
                   "VPdef (mbar)", "sh (g/kg)", "H2OC (mmol/mol)", "rho (g/m**3)", "wv (m/s)", "max. wv (m/s)",
                   "wd (deg)", "rain (mm)", "raining (s)", "SWDR (W/m²)", "PAR (µmol/m²/s)", "max. PAR (µmol/m²/s)",
                   "Tlog (degC)", "OT")  # fmt: skip
ILI_COLUMNS = ("% WEIGHTED ILI", "%UNWEIGHTED ILI", "AGE 0-4", "AGE 5-24", "ILITOTAL", "NUM. OF PROVIDERS", "OT")


def numbered(count: int) -> tuple[str, ...]:
    """``0``, ``1``, …, then ``OT``: the columns of the benchmark's numbered series (one per client, sensor, rate)."""
    return (*map(str, range(count - 1)), "OT")


@dataclass(frozen=True)
class Benchmark:
    """One file of the benchmark: where it lives in TSLib's bundle, its checksums, its columns and its rows."""

    file: str  # folder/name.csv in TSLib's bundle
    sha256: tuple[str, ...]
    columns: tuple[str, ...]
    rows: int  # the file's, as TSLib's tutorial/dataset.png lists them
    freq: str  # its step, for the sample
    start: str  # its first date, for the sample
    date_format: Callable | str = "%Y-%m-%d %H:%M:%S"
    encoding: str = "utf-8"

    @staticmethod
    def borders(n: int) -> tuple[int, int, int]:
        """``Dataset_Custom``'s: train ``int(0.7 n)``, test ``int(0.2 n)``, validation the rest."""
        return int(n * 0.7), n - int(n * 0.2), n

    def load(self, root: Path, download: bool, path: str | None = None) -> Series:
        name = self.file.split("/")[-1]
        found = fetch(TSLIB_URL.format(file=self.file), Path(root) / name, self.sha256, download)
        return read_csv(found, self.borders, self.columns, regular=False)

    def sample(self, rows: int) -> Callable[[Path], list[str]]:
        def write(root: Path) -> list[str]:
            write_sample_csv(root / self.file.split("/")[-1], rows, self.freq, self.columns, start=self.start,
                             date_format=self.date_format, encoding=self.encoding, float_format="%.4f")  # fmt: skip
            return []

        return write


def unpadded_day(dates) -> list[str]:
    """Exchange's dates: ``1990/1/1 0:00`` (month, day and hour not zero-padded)."""
    return [f"{d.year}/{d.month}/{d.day} {d.hour}:{d.minute:02d}" for d in dates]


BENCHMARKS = {
    "weather": Benchmark("weather/weather.csv", ("34ee981d07313e51da2a50bb600072c8ae4a69cb4b0651f4cb93a069d7a2ba63",),
                         WEATHER_COLUMNS, 52_696, "10min", "2020-01-01 00:10", encoding="latin-1"),
    "electricity": Benchmark("electricity/electricity.csv",
                             ("7e45845d54c5219bad0ae6bc1b5316cf8ff9cead5d33fa998a5a51c2e4a497ad",), numbered(321),
                             26_304, "h", "2016-07-01 02:00"),
    "traffic": Benchmark("traffic/traffic.csv", ("cb06463d56fa17d87f47027cd9389ceae82a69eddee51cdb61480e120dab0b16",),
                         numbered(862), 17_544, "h", "2016-07-01 02:00"),
    "exchange": Benchmark("exchange_rate/exchange_rate.csv",
                          ("48b4d9d3d508f5104162e85b9a6042e3557fde11aa9f2944eba8c0d0efc89842",
                           "d55e7aa2641009814a18ba3279431b13f6d413b0eab195b9ff21988d8cf94e97"), numbered(8), 7_588,
                          "D", "1990-01-01", date_format=unpadded_day),
    "ili": Benchmark("illness/national_illness.csv",
                     ("93601f64d2566dc796ca4305adad8b8560c2db1a1ff04543c3bd813a7263570a",
                      "8594cecb98c6f2f9dc014eca11c4d5d1e38ad5ce6ed0592d4abe65b146fce395"), ILI_COLUMNS, 966, "7D",
                     "2002-01-01"),
}  # fmt: skip
#: Rows of each generated sample: the small files whole, a slice of the large ones (their split is by fractions).
SAMPLE_ROWS = {"weather": 1_000, "electricity": 600, "traffic": 400, "exchange": 7_588, "ili": 966}

for _name, _benchmark in BENCHMARKS.items():
    SOURCES[_name] = _benchmark.load
    SAMPLES[_name] = _benchmark.sample(SAMPLE_ROWS[_name])
