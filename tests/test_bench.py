"""The benchmark runs and reports ratios against `none` (timing itself is not asserted)."""

from __future__ import annotations

from poslab.bench import TARGETS, BenchConfig, peak_memory, peak_memory_child, time_steps
from poslab.encoders import available_encoders

TINY = BenchConfig(length=32, batch=2, dim=32, depth=1, heads=2, rounds=1, steps=1)


def test_every_text_encoder_is_timed():
    times = time_steps(available_encoders("text"), TINY)
    assert set(times) == set(available_encoders("text"))
    assert all(t > 0 for t in times.values())


def test_peak_memory_in_process_and_in_a_fresh_process():
    assert peak_memory_child("alibi", TINY) >= 0
    assert peak_memory("none", TINY) >= 0


def test_targets_name_registered_encoders():
    assert set(TARGETS) <= set(available_encoders("text"))
