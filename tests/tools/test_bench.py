"""The benchmark: rounds, ratios to `none`, verdicts against the targets, records and table.

Timing itself is not asserted; the arithmetic is, on given numbers (the clock,
the steps and the memory readings replaced where a test says so).
"""

from __future__ import annotations

import json
import types
from dataclasses import replace

import pytest

from poslab.encoders import available_encoders
from poslab.tools.bench import (
    RECORD_KEYS,
    TARGET_LENGTH,
    TARGETS,
    BenchConfig,
    main,
    peak_memory,
    peak_memory_child,
    round_ratios,
    time_samples,
    time_steps,
    timed_at,
)

TINY = BenchConfig(length=32, batch=2, dim=32, depth=1, heads=2, rounds=1, steps=1)
TEXT = available_encoders("text")


def test_every_text_encoder_is_timed():
    times = time_steps(TEXT, TINY)
    assert set(times) == set(TEXT)
    assert all(t > 0 for t in times.values())


def test_rounds_interleave_the_encoders_and_time_one_step(monkeypatch):
    """A fake clock that each step advances by its encoder's cost: every encoder warms up once, then each round
    runs every encoder `steps` times back to back, and a sample is the ms of one step."""
    import poslab.tools.bench

    clock, calls = [0.0], []
    cost = {"none": 0.010, "alibi": 0.013, "t5": 0.021}  # seconds a step

    def fake_build(name, cfg):
        def step():
            calls.append(name)
            clock[0] += cost[name]

        return step

    monkeypatch.setattr(poslab.tools.bench, "build", fake_build)
    monkeypatch.setattr(poslab.tools.bench, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    cfg = replace(TINY, rounds=3, steps=2)
    samples = time_samples(list(cost), cfg)
    assert calls == list(cost) + 3 * ["none", "none", "alibi", "alibi", "t5", "t5"]
    assert samples == {n: pytest.approx([1000 * c] * 3) for n, c in cost.items()}
    assert time_steps(list(cost), cfg) == {n: pytest.approx(1000 * c) for n, c in cost.items()}


def test_time_ratios_are_taken_within_each_round():
    """The machine slows down between rounds: per-round ratios see 1.1 every time; medians would not."""
    samples = {"none": [100.0, 300.0, 200.0], "t5": [110.0, 330.0, 220.0], "alibi": [100.0, 300.0, 200.0]}
    assert round_ratios(samples) == pytest.approx({"none": 1.0, "t5": 1.1, "alibi": 1.0})
    samples["t5"] = [110.0, 180.0, 330.0]  # ratios 1.1, 0.6, 1.65: median 1.1; ratio of medians 180 / 200 = 0.9
    assert round_ratios(samples)["t5"] == pytest.approx(1.1)
    assert round_ratios(samples, reference="t5")["none"] == pytest.approx(100 / 110)  # 0.909, 1.667, 0.606


@pytest.mark.slow
def test_peak_memory_grows_with_the_sequence_and_fresh_processes_read_the_same():
    small, large = peak_memory_child("none", TINY), peak_memory_child("none", replace(TINY, length=256))
    assert large > 2 * small > 0  # activations grow with L (attention with L²)
    # The bench measures in a fresh process because an in-process reading depends on what ran before
    # (global torch settings such as deterministic algorithms, the heap's state): two fresh processes
    # agree, at a size where activations dominate (sub-MB peaks move with the heap's state).
    longer = replace(TINY, length=256)
    first, second = peak_memory("alibi", longer), peak_memory("alibi", longer)
    assert first > 0.5 and first == pytest.approx(second, rel=0.1)


def test_targets_name_registered_encoders():
    assert set(TARGETS) <= set(TEXT)


#: ms of one step in each of three rounds: the machine slows 2x, then 2x again.
NONE_MS = [100.0, 200.0, 400.0]
FAKE_MS = {
    "none": NONE_MS,
    "sinusoidal": [104.0, 208.0, 416.0],  # 1.04 <= 1.05
    "learned": [105.0, 210.0, 420.0],  # 1.05: exactly at its target, still met
    "rope": [110.0, 220.0, 440.0],  # 1.10 <= 1.15
    "alibi": [120.0, 240.0, 480.0],  # 1.20 <= 1.3, but memory 1.6 > 1.5: missed
    "t5": [140.0, 280.0, 560.0],  # 1.40 > 1.3: missed
    "relative": [100.0, 300.0, 400.0],  # per round 1.0, 1.5, 1.0 -> 1.0 (ratio of medians would be 1.5)
}
FAKE_MB = {"none": 10.0, "alibi": 16.0, "relative": 15.0}  # others as none
EXPECTED = {  # (time ratio, memory ratio, ok at L=1024, target)
    "none": (1.0, 1.0, None, "—"),
    "sinusoidal": (1.04, 1.0, True, "≤1.05x time"),
    "learned": (1.05, 1.0, True, "≤1.05x time"),
    "rope": (1.1, 1.0, True, "≤1.15x time"),
    "alibi": (1.2, 1.6, False, "≤1.3x time, ≤1.5x mem"),
    "t5": (1.4, 1.0, False, "≤1.3x time, ≤1.5x mem"),
    "relative": (1.0, 1.5, True, "≤1.3x time, ≤1.5x mem"),
    "kerple": (1.0, 1.0, True, "≤1.3x time, ≤1.5x mem"),  # as cheap as none: every target met
    "fire": (1.0, 1.0, True, "≤1.3x time, ≤1.5x mem"),
    "xpos": (1.0, 1.0, True, "≤1.15x time"),
    "rnope": (1.0, 1.0, True, "≤1.15x time"),
}


def fake_measurements(monkeypatch, times=None, memory=None):
    """The bench's measurements replaced by given numbers (encoders not named cost what `none` does)."""
    import poslab.tools.bench

    times, memory = times or FAKE_MS, memory or FAKE_MB
    monkeypatch.setattr(
        poslab.tools.bench, "time_samples", lambda names, cfg: {n: list(times.get(n, times["none"])) for n in names}
    )
    monkeypatch.setattr(poslab.tools.bench, "peak_memory", lambda name, cfg: memory.get(name, memory["none"]))


def test_records_carry_ratios_to_none_and_verdicts_at_the_target_length(monkeypatch, tmp_path, capsys):
    fake_measurements(monkeypatch)
    monkeypatch.setenv("COLUMNS", "200")  # rich: every cell on one line
    out = tmp_path / "results.json"
    assert main(["--lengths", "256", str(TARGET_LENGTH), "--out", str(out)]) == 0  # misses, but no --check
    records = json.loads(out.read_text())
    targeted = [n for n in TEXT if n in TARGETS]
    assert [(r["seq_len"], r["encoder"]) for r in records] == [
        *[(256, n) for n in ["none", *[e for e in TEXT if e != "none"]]],
        *[(TARGET_LENGTH, n) for n in ["none", *targeted]],  # CoPE (no target) only below the target length
    ]
    for r in records:
        times = FAKE_MS.get(r["encoder"], NONE_MS)
        time_ratio, memory_ratio, ok, target = EXPECTED.get(r["encoder"], (1.0, 1.0, None, "—"))
        assert r["step_ms"] == pytest.approx(sorted(times)[1]), r  # median over the rounds
        assert r["peak_mem_mb"] == FAKE_MB.get(r["encoder"], 10.0)
        assert r["time_ratio"] == pytest.approx(time_ratio), r
        assert r["memory_ratio"] == pytest.approx(memory_ratio), r
        if r["seq_len"] == TARGET_LENGTH:
            assert (r["ok"], r["target"]) == (ok, target), r
        else:
            assert (r["ok"], r["target"]) == (None, "—"), r  # verdicts only at the length the targets name
    table = capsys.readouterr().out
    rows = {line.split("│")[2].strip(): line for line in table.splitlines() if f"│ {TARGET_LENGTH} │" in line}
    assert set(rows) == {"none", *targeted}  # one row per encoder timed at that length
    for name, (time_ratio, memory_ratio, ok, _) in EXPECTED.items():
        cells = [c.strip() for c in rows[name].split("│")]
        assert cells[4] == f"{time_ratio:.2f}" and cells[6] == f"{memory_ratio:.2f}"
        assert cells[8] == {True: "yes", False: "NO", None: ""}[ok]


def test_biases_are_held_to_their_long_target_past_the_target_length(monkeypatch, tmp_path):
    """At 2048 and 4096 every targeted encoder with an additive bias (read from its hooks) gets the 1.3x time
    and memory verdict; the others get none. --check counts those verdicts too."""
    from poslab.encoders import encoder_class

    fake_measurements(monkeypatch, memory={"none": 10.0, "relative": 14.0})  # 1.4x: over the long target only
    out = tmp_path / "results.json"
    assert main(["--lengths", "2048", "--out", str(out)]) == 0
    records = {r["encoder"]: r for r in json.loads(out.read_text())}
    biases = {n for n in TARGETS if encoder_class(n).uses("attention_bias")}
    assert {"alibi", "t5", "relative", "kerple", "fire"} <= biases
    for name, r in records.items():
        if name in biases:
            assert r["target"] == "≤1.3x time, ≤1.3x mem", r
            assert r["ok"] == (r["time_ratio"] <= 1.3 and r["memory_ratio"] <= 1.3), r
        else:
            assert (r["target"], r["ok"]) == ("—", None), r
    assert not records["t5"]["ok"] and not records["relative"]["ok"] and records["kerple"]["ok"]
    assert main(["--lengths", "2048", "--out", str(out), "--check"]) == 1


def test_check_fails_only_when_a_target_is_missed(monkeypatch, tmp_path):
    fake_measurements(monkeypatch)
    args = ["--lengths", str(TARGET_LENGTH), "--out", str(tmp_path / "results.json"), "--check"]
    assert main(args) == 1  # alibi's memory, t5's time
    met = {**FAKE_MS, "alibi": NONE_MS, "t5": [130.0, 260.0, 520.0]}  # t5 at exactly 1.3
    fake_measurements(monkeypatch, times=met, memory={"none": 10.0, "alibi": 15.0})
    assert main(args) == 0
    assert main(["--lengths", "256", "--out", str(tmp_path / "r.json"), "--check"]) == 0  # no targets at 256


def test_bench_writes_one_record_per_length_and_encoder(tmp_path, capsys, monkeypatch):
    import poslab.tools.bench

    def fake_memory(name, cfg):  # memory itself is measured by the peak-memory test; here: what is recorded
        return 10.0 + len(name) + cfg.length / 8

    monkeypatch.setattr(poslab.tools.bench, "peak_memory", fake_memory)
    out = tmp_path / "bench" / "results.json"
    args = ["--lengths", "16", "24", "--batch", "1", "--dim", "16", "--depth", "1", "--heads", "2"]
    assert main([*args, "--rounds", "1", "--steps", "1", "--out", str(out)]) == 0
    records = json.loads(out.read_text())
    assert [(r["encoder"], r["seq_len"]) for r in records] == [
        (n, length) for length in (16, 24) for n in ["none", *[e for e in TEXT if e != "none"]]
    ]
    assert all(set(RECORD_KEYS) <= set(r) for r in records)
    assert all(r["step_ms"] > 0 for r in records)
    for r in records:
        assert r["peak_mem_mb"] == pytest.approx(
            fake_memory(r["encoder"], replace(TINY, length=r["seq_len"])), abs=0.01
        )
        none = fake_memory("none", replace(TINY, length=r["seq_len"]))
        assert r["memory_ratio"] == pytest.approx(r["peak_mem_mb"] / none, abs=0.01)
    assert all(r["time_ratio"] == 1.0 and r["memory_ratio"] == 1.0 for r in records if r["encoder"] == "none")
    assert all(r["ok"] is None for r in records)  # verdicts only at L=1024
    assert "records:" in capsys.readouterr().out and not list(out.parent.glob("*.partial"))


def test_poslab_bench_passes_its_options_through(capsys):
    from poslab.cli import main as cli_main

    with pytest.raises(SystemExit) as exit_info:
        cli_main(["bench", "--help"])
    assert exit_info.value.code == 0 and "--lengths" in capsys.readouterr().out


def test_encoders_picks_a_subset_timed_against_none_and_a_typo_is_one_line(monkeypatch, tmp_path, capsys):
    fake_measurements(monkeypatch)
    out = tmp_path / "results.json"
    assert main(["--lengths", str(TARGET_LENGTH), "--encoders", "t5", "alibi", "--out", str(out)]) == 0
    assert [r["encoder"] for r in json.loads(out.read_text())] == ["none", "t5", "alibi"]
    capsys.readouterr()
    assert main(["--lengths", "16", "--encoders", "alibj", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("poslab: error: bench: unknown 1D encoder 'alibj'; valid: ") and err.count("\n") == 1


def test_encoders_without_a_target_are_timed_at_and_past_the_target_length_only_when_named(
    monkeypatch, tmp_path, capsys
):
    """CoPE (no target, L x L by design) would take most of a default run at 1024: it is timed below the target
    length, and at every length when --encoders names it; the run says so."""
    fake_measurements(monkeypatch)
    out = tmp_path / "results.json"
    untargeted = [n for n in TEXT if n != "none" and n not in TARGETS]
    assert untargeted, "every encoder has a target: nothing to check"
    assert main(["--lengths", "256", str(TARGET_LENGTH), "--out", str(out)]) == 0
    timed = {(r["seq_len"], r["encoder"]) for r in json.loads(out.read_text())}
    assert {(256, n) for n in TEXT} <= timed
    assert {(TARGET_LENGTH, n) for n in TARGETS} <= timed and not {(TARGET_LENGTH, n) for n in untargeted} & timed
    printed = capsys.readouterr().out
    assert f"{', '.join(untargeted)} at L = {TARGET_LENGTH};" in printed
    assert f"--encoders {' '.join(untargeted)} times them at every length" in printed
    assert main(["--lengths", "2048", "--encoders", *untargeted, "--out", str(out)]) == 0
    assert {r["encoder"] for r in json.loads(out.read_text())} == {"none", *untargeted}


def test_the_default_run_times_each_encoder_where_it_is_held_to_a_target(monkeypatch, tmp_path, capsys):
    """Without --lengths: the target length and the long ones. At 1024 every targeted encoder; at 2048 the
    additive biases (held to the long target there); at 4096 the biases built from their offsets, not one laid
    out L x L by design (4x per doubling: it already misses at 2048). Read from the hooks, not from names."""
    from poslab.encoders import encoder_class

    fake_measurements(monkeypatch)
    out = tmp_path / "results.json"
    assert main(["--out", str(out)]) == 0
    timed = {}
    for r in json.loads(out.read_text()):
        timed.setdefault(r["seq_len"], set()).add(r["encoder"])
    biases = {n for n in TARGETS if encoder_class(n).uses("attention_bias")}
    from_offsets = {n for n in biases if encoder_class(n).uses("relative_bias")}
    assert {"alibi", "t5", "relative", "kerple"} <= from_offsets and "fire" in biases - from_offsets
    assert timed == {1024: {"none", *TARGETS}, 2048: {"none", *biases}, 4096: {"none", *from_offsets}}
    beyond = {n for n in TARGETS if timed_at(n, 8192)}  # a length asked for past the long ones: the same rule
    assert beyond == from_offsets
    printed = capsys.readouterr().out
    assert "fire at L = 4096" in printed and "--encoders " in printed


@pytest.mark.slow
def test_the_streaming_benchmark_measures_every_figure_at_toy_size(tmp_path, capsys):
    from poslab.tools import stream_bench

    out = tmp_path / "stream.json"
    argv = ["--megabytes", "0.3", "--vocab", "300", "--context", "16", "--batch", "4", "--depth", "1", "--width",
            "32", "--heads", "2", "--shard-mb", "0.05", "--small", "1", "--large", "3", "--out", str(out)]  # fmt: skip
    assert stream_bench.main(argv) == 0
    record = json.loads(out.read_text())
    assert record["prepare"]["tokens_per_s"] > 0 and record["model_tokens_per_s"] > 0
    assert record["memory"]["large"]["windows"] > 2 * record["memory"]["small"]["windows"]
    assert 0 < record["memory"]["large"]["peak_mib"] < 4 * record["memory"]["small"]["peak_mib"]
    assert "| memory | 3x the corpus |" in capsys.readouterr().out
