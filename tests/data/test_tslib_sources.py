"""Time-Series-Library's long-term benchmark files: each read as TSLib's ``data_loader.py`` reads it, from generated
files in each one's exact layout (columns, date format), offline; its split borders at the real row counts; bad
files one line naming the file, the line or column and the cause."""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd
import pytest

from poslab.config.composition import compose
from poslab.data.downloads import fetch
from poslab.errors import ConfigError, DataError
from poslab.modalities.timeseries import sources as timeseries_sources
from poslab.modalities.timeseries.data import TimeSeriesDataModule
from poslab.modalities.timeseries.sources import SAMPLES, SOURCES
from poslab.modalities.timeseries.sources.tslib import BENCHMARKS


def datamodule(*overrides: str) -> TimeSeriesDataModule:
    dm = TimeSeriesDataModule(compose(["modality=timeseries", *overrides]).data)
    dm.setup()
    return dm


# Dataset_Custom (thuml/Time-Series-Library data_provider/data_loader.py): num_train = int(n * 0.7),
# num_test = int(n * 0.2), border1s = [0, num_train - L, n - num_test - L], border2s = [num_train, n - num_test, n]:
# the targets of train, val and test end at these rows, for the row counts of TSLib's tutorial/dataset.png.
TSLIB_BORDERS = {
    "electricity": (26_304, (18_412, 21_044, 26_304)),
    "traffic": (17_544, (12_280, 14_036, 17_544)),
    "weather": (52_696, (36_887, 42_157, 52_696)),
    "exchange": (7_588, (5_311, 6_071, 7_588)),
    "ili": (966, (676, 773, 966)),
}


@pytest.mark.parametrize("name", sorted(TSLIB_BORDERS))
def test_the_benchmark_splits_70_10_20_percent_of_the_rows_as_tslib_truncates_them(name):
    rows, borders = TSLIB_BORDERS[name]
    assert BENCHMARKS[name].rows == rows and BENCHMARKS[name].borders(rows) == borders


LAYOUTS = {  # columns after date, the step in seconds, the first date as written
    "weather": (21, 600, "2020-01-01 00:10:00"),
    "electricity": (321, 3600, "2016-07-01 02:00:00"),
    "traffic": (862, 3600, "2016-07-01 02:00:00"),
    "exchange": (8, 86_400, "1990/1/1 0:00"),
    "ili": (7, 604_800, "2002-01-01 00:00:00"),
}


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_each_file_in_its_layout_reads_with_its_columns_step_and_split(name, tmp_path, accept_any_checksum):
    columns, step, first = LAYOUTS[name]
    SAMPLES[name](tmp_path)
    path = tmp_path / BENCHMARKS[name].file.split("/")[-1]
    with open(path, encoding=BENCHMARKS[name].encoding) as f:
        header, line = f.readline().rstrip("\n").split(","), f.readline()
    assert header[0] == "date" and header[-1] == "OT" and len(header) == columns + 1 and line.startswith(first + ",")
    series = SOURCES[name](tmp_path, False)
    assert series.values.shape[1] == columns and series.step_seconds == step and series.columns[-1] == "OT"
    assert (
        series.times[0] == pd.Timestamp(first.replace("/", "-") if name != "exchange" else "1990-01-01").value // 10**9
    )
    assert series.borders == BENCHMARKS[name].borders(len(series.values))


def test_weathers_latin_1_header_reads_and_a_utf_8_copy_too(tmp_path, accept_any_checksum):
    SAMPLES["weather"](tmp_path)
    raw = (tmp_path / "weather.csv").read_bytes()
    assert b"SWDR (W/m\xb2)" in raw and b"PAR (\xb5mol/m\xb2/s)" in raw  # not UTF-8, as TSLib's copy
    assert SOURCES["weather"](tmp_path, False).columns[16] == "SWDR (W/m²)"
    (tmp_path / "weather.csv").write_bytes(raw.decode("latin-1").encode("utf-8"))
    assert SOURCES["weather"](tmp_path, False).columns[17] == "PAR (µmol/m²/s)"


def test_the_ett_files_split_by_months_and_come_from_etdataset_or_tslibs_copy(tmp_path, monkeypatch):
    asked = []
    monkeypatch.setattr(timeseries_sources, "fetch", lambda urls, path, sha, download: asked.append(urls) or path)
    SAMPLES["etth2"](tmp_path), SAMPLES["ettm2"](tmp_path)
    assert SOURCES["etth2"](tmp_path, False).borders == (8_640, 11_520, 14_400)
    assert SOURCES["ettm2"](tmp_path, False).borders == (34_560, 46_080, 57_600)
    assert asked[0] == (
        "https://raw.githubusercontent.com/zhouhaoyi/ETDataset/main/ETT-small/ETTh2.csv",
        "https://huggingface.co/datasets/thuml/Time-Series-Library/resolve/main/ETT-small/ETTh2.csv",
    )


def test_a_file_with_lf_or_crlf_line_ends_passes_and_any_other_fails_its_checksum(tmp_path):
    lf, crlf = b"date,OT\n2020-01-01,1\n", b"date,OT\r\n2020-01-01,1\r\n"
    digests = tuple(hashlib.sha256(b).hexdigest() for b in (lf, crlf))
    for content in (lf, crlf):
        (tmp_path / "f.csv").write_bytes(content)
        assert fetch("https://unused.invalid/f.csv", tmp_path / "f.csv", digests, download=False) == tmp_path / "f.csv"
    (tmp_path / "f.csv").write_bytes(lf.replace(b"1\n", b"2\n"))
    with pytest.raises(DataError, match=r"f\.csv fails its checksum \(sha256 .*, expected " + digests[0][:12]):
        fetch("https://unused.invalid/f.csv", tmp_path / "f.csv", digests, download=False)


def test_offline_a_missing_file_names_where_to_get_it(tmp_path):
    with pytest.raises(DataError, match=r"traffic\.csv is missing and data\.download=false; download "
                                        r"https://huggingface\.co/datasets/thuml/Time-Series-Library/resolve/main/"
                                        r"traffic/traffic\.csv there"):  # fmt: skip
        SOURCES["traffic"](tmp_path, False)


def ili_frame(rows: int = 966) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    columns = BENCHMARKS["ili"].columns
    frame = pd.DataFrame(rng.normal(size=(rows, len(columns))), columns=list(columns))
    frame.insert(0, "date", pd.date_range("2002-01-01", periods=rows, freq="7D").strftime("%Y-%m-%d %H:%M:%S"))
    return frame


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda f: f.drop(columns=["AGE 0-4"]), r"missing column\(s\) 'AGE 0-4'; expected 7 columns after 'date': "
                                                r"% WEIGHTED ILI, …, OT$"),
        (lambda f: f.assign(extra=1.0), r"unexpected column\(s\) 'extra'; expected 7 columns"),
        (lambda f: f[["date", *reversed(f.columns[1:])]], r"columns out of order; expected 7 columns"),
        (lambda f: f.assign(date=f.date.where(f.index != 9, "2002-13-45")), r", line 11: date '2002-13-45' does not "
                                                                            r"parse$"),
        (lambda f: f.assign(date=f.date.where(f.index != 9, f.date[7])), r", line 11: date 2002-02-19 00:00:00 does "
                                                                         r"not follow 2002-02-26 00:00:00 \(dates must "
                                                                         r"increase\)$"),
        (lambda f: f.assign(date=f.date.where(f.index != 9, f.date[8])), r", line 11: date 2002-02-26 00:00:00 does "
                                                                         r"not follow 2002-02-26 00:00:00"),
        (lambda f: f.assign(OT=f.OT.where(f.index != 4, np.inf)), r", line 6: column 'OT' is inf \(not a number\)$"),
    ],
    ids=["missing column", "extra column", "columns out of order", "bad date", "out of order", "duplicate", "inf"],
)  # fmt: skip
def test_a_bad_benchmark_file_is_one_line_naming_the_file_and_the_cause(change, message, tmp_path, accept_any_checksum):
    change(ili_frame()).to_csv(tmp_path / "national_illness.csv", index=False)
    before = sorted(tmp_path.iterdir())
    with pytest.raises(DataError, match=message) as caught:
        datamodule("data=ili", f"data.root={tmp_path}", "data.download=false", "data.lookback=36", "data.horizon=24")
    assert str(caught.value).startswith(str(tmp_path / "national_illness.csv")) and "\n" not in str(caught.value)
    assert sorted(tmp_path.iterdir()) == before  # nothing written


def test_too_few_rows_for_the_lookback_and_horizon_is_one_line(tmp_path, accept_any_checksum):
    ili_frame().to_csv(tmp_path / "national_illness.csv", index=False)
    with pytest.raises(
        ConfigError,
        match=r"^data\.lookback=36 \+ data\.horizon=120 leave no val window in ili \(966 "
        r"rows; val targets are rows 676-773\)$",
    ):
        datamodule("data=ili", f"data.root={tmp_path}", "data.download=false", "data.lookback=36", "data.horizon=120")
    dm = datamodule("data=ili", f"data.root={tmp_path}", "data.download=false", "data.lookback=36", "data.horizon=60")
    assert len(dm.windows("test")) == 193 - 60 + 1  # TSLib's test windows: the 193 test rows, each H ahead
