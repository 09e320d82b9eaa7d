"""What a training step costs (perf/tokens_per_s, perf/samples_per_s, perf/mfu): PaLM's model FLOPs (Chowdhery et
al. 2022, appendix B) counted by hand here, the device's peak from the data sheet or a cached CPU measurement."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from poslab.config.composition import compose
from poslab.run import throughput
from poslab.run.throughput import StepShape, cpu_peak_flops, peak_flops, token_flops, weight_count
from poslab.run.train import train


def test_the_weights_leave_out_embedding_tables_unless_an_output_layer_shares_one():
    table, head = nn.Embedding(100, 8), nn.Linear(8, 100, bias=False)
    model = nn.ModuleDict({"embed": table, "mix": nn.Linear(8, 8), "head": head})
    assert weight_count(model) == 8 * 8 + 8 + 100 * 8  # the table's 800 are looked up, not multiplied
    head.weight = table.weight  # tied (GPT-2): the table multiplies in the head, counted once
    assert weight_count(model) == 8 * 8 + 8 + 100 * 8


def test_model_flops_are_six_per_weight_and_twelve_per_layer_width_and_length_per_token():
    """Golden values: N = 1,000 weights, 2 layers of width 16, a batch of 3 sequences of 10 tokens."""
    shape = StepShape(samples=3, tokens=30, token_lengths=3 * 10 * 10, depth=2, width=16)
    assert shape.model_flops(1_000) == 6 * 1_000 * 30 + 12 * 2 * 16 * 10 * 30  # 180,000 + 115,200
    assert token_flops(1_000, 2, 16, 10) == 6 * 1_000 + 12 * 2 * 16 * 10


@pytest.mark.parametrize(
    ("name", "peak"),
    [("NVIDIA H200", 989e12), ("NVIDIA H100 80GB HBM3", 989e12), ("NVIDIA A100-SXM4-80GB", 312e12), ("Tesla T4", None)],
)
def test_a_gpus_peak_is_its_dense_bf16_data_sheet_figure(monkeypatch, name, peak):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    assert peak_flops(torch.device("cuda", 0)) == peak
    assert peak_flops(torch.device("meta")) is None


def test_the_cpus_peak_is_measured_once_per_thread_count_and_a_bad_cache_is_measured_again(tmp_path, monkeypatch):
    monkeypatch.setenv("POSLAB_CACHE", str(tmp_path))
    measured = []

    def measure(threads: int) -> float:
        measured.append(threads)
        return 1e9 * threads

    monkeypatch.setattr(throughput, "measure_matmul_flops", measure)
    assert cpu_peak_flops(1) == 1e9 and cpu_peak_flops(1) == 1e9 and cpu_peak_flops(2) == 2e9
    assert measured == [1, 2]
    cached = json.loads((tmp_path / "peak_flops.json").read_text())
    assert sorted(cached.values()) == [1e9, 2e9] and all("torch " in key for key in cached)
    (tmp_path / "peak_flops.json").write_text("{not json")
    assert cpu_peak_flops(1) == 1e9 and measured == [1, 2, 1]


def test_a_measured_matmul_peak_is_a_plausible_cpu_figure():
    flops = throughput.measure_matmul_flops(1, size=256, repeats=2)
    assert 1e8 < flops < 1e13  # 0.1 GFLOP/s .. 10 TFLOP/s for one thread


def test_a_text_runs_throughput_counts_its_windows_and_palms_flops(tiny_text, monkeypatch):
    """A step of 8 windows of 16 tokens: 128 tokens; MFU from the weights outside the token table, counted
    here from the checkpoint, against a peak of 1 TFLOP/s."""
    monkeypatch.setattr("poslab.run.callbacks.peak_flops", lambda device: 1e12)
    summary = train(compose([*tiny_text, "model.depth=2"]))
    metrics = summary["metrics"]
    step = metrics["perf/train_step_ms"] / 1000
    assert metrics["perf/tokens_per_s"] == pytest.approx(8 * 16 / step)
    assert metrics["perf/samples_per_s"] == pytest.approx(8 / step)
    best = Path(summary["run_dir"]) / summary["checkpoints"]["best"]
    state = torch.load(best, map_location="cpu", weights_only=True)["state_dict"]
    weights = sum(t.numel() for k, t in state.items() if k.startswith("model.") and k != "model.embed.weight")
    flops = 6 * weights * 8 * 16 + 12 * 2 * 32 * 16 * (8 * 16)  # 12 · layers · width · L per token
    assert metrics["perf/mfu"] == pytest.approx(flops / step / 1e12)


def test_a_vision_runs_tokens_are_its_patches_and_class_token(tiny):
    """28-pixel images in 7-pixel patches: 16 patches and the class token per image; the CPU's peak is
    measured (and MFU is a fraction of it)."""
    metrics = train(compose(tiny))["metrics"]
    assert metrics["perf/tokens_per_s"] / metrics["perf/samples_per_s"] == pytest.approx(17)
    assert 0 < metrics["perf/mfu"] < 1


def test_measuring_the_cpus_peak_leaves_the_global_rng_and_threads_as_they_were():
    """It runs inside a training run (after its first step): a run that measures draws what one that reads
    the cache does."""
    torch.manual_seed(3)
    threads = torch.get_num_threads()
    expected = torch.rand(3)
    torch.manual_seed(3)
    throughput.measure_matmul_flops(1, size=64, repeats=1)
    assert torch.equal(torch.rand(3), expected) and torch.get_num_threads() == threads
