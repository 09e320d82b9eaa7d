"""The benchmark runs and reports ratios against `none` (timing itself is not asserted)."""

from __future__ import annotations

import json

from poslab.bench import (
    RECORD_KEYS,
    TARGETS,
    BenchConfig,
    main,
    peak_memory,
    peak_memory_child,
    round_ratios,
    time_steps,
)
from poslab.encoders import available_encoders

TINY = BenchConfig(length=32, batch=2, dim=32, depth=1, heads=2, rounds=1, steps=1)


def test_every_text_encoder_is_timed():
    times = time_steps(available_encoders("text"), TINY)
    assert set(times) == set(available_encoders("text"))
    assert all(t > 0 for t in times.values())


def test_time_ratios_are_taken_within_each_round():
    """The machine slows down between rounds: per-round ratios see 1.1 every time; medians would not."""
    samples = {"none": [100.0, 300.0, 200.0], "t5": [110.0, 330.0, 220.0], "alibi": [100.0, 300.0, 200.0]}
    assert round_ratios(samples) == {"none": 1.0, "t5": 1.1, "alibi": 1.0}
    samples["t5"] = [110.0, 180.0, 330.0]  # ratios 1.1, 0.6, 1.65: median 1.1; ratio of medians 180 / 200 = 0.9
    assert round_ratios(samples)["t5"] == 1.1


def test_peak_memory_in_process_and_in_a_fresh_process():
    assert peak_memory_child("alibi", TINY) >= 0
    assert peak_memory("none", TINY) >= 0


def test_targets_name_registered_encoders():
    assert set(TARGETS) <= set(available_encoders("text"))


def test_bench_writes_one_record_per_length_and_encoder(tmp_path, capsys, monkeypatch):
    import poslab.bench

    monkeypatch.setattr(poslab.bench, "peak_memory", peak_memory_child)  # in-process: fast, same numbers' shape
    out = tmp_path / "bench" / "results.json"
    args = ["--lengths", "16", "24", "--batch", "1", "--dim", "16", "--depth", "1", "--heads", "2"]
    assert main([*args, "--rounds", "1", "--steps", "1", "--out", str(out)]) == 0
    records = json.loads(out.read_text())
    names = available_encoders("text")
    assert [(r["encoder"], r["seq_len"]) for r in records] == [
        (n, length) for length in (16, 24) for n in ["none", *[e for e in names if e != "none"]]
    ]
    assert all(set(RECORD_KEYS) <= set(r) for r in records)
    assert all(r["time_ratio"] == 1.0 and r["memory_ratio"] == 1.0 for r in records if r["encoder"] == "none")
    assert all(r["ok"] is None for r in records)  # verdicts only at L=1024
    assert "records:" in capsys.readouterr().out and not list(out.parent.glob("*.partial"))


def test_poslab_bench_passes_its_options_through(capsys):
    import pytest

    from poslab.cli import main as cli_main

    with pytest.raises(SystemExit) as exit_info:
        cli_main(["bench", "--help"])
    assert exit_info.value.code == 0 and "--lengths" in capsys.readouterr().out
