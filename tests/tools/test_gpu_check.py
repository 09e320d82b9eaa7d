"""``make gpu-check``: exercised on the CPU by its dry run (its figures are only checked on a GPU)."""

from __future__ import annotations

import pytest
import torch

from poslab.tools import gpu_check


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present")
def test_without_cuda_it_is_one_line_and_exit_2(capsys):
    assert gpu_check.main([]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no CUDA device is present" in err and "--dry-run" in err


@pytest.mark.slow
def test_dry_run_prints_one_table_of_the_checks(capsys):
    assert gpu_check.main(["--dry-run", "--only", "flex", "speed", "memory"]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("|")]
    assert lines[0] == "| check | case | result | status |"
    cases = [line.split(" | ")[1] for line in lines[2:]]
    assert [c.split()[0] for c in cases if c.endswith("B=2")] == gpu_check.SPEED_ENCODERS
    assert sum(c.startswith("L=") and c.endswith("B=1") for c in cases) == len(gpu_check.Sizes.dry_run().memory_lengths)
    assert all(line.endswith("| ok |") for line in lines[2:])


@pytest.mark.parametrize("name", gpu_check.bias_encoders())
def test_the_flex_check_compares_every_bias_encoder_and_sees_a_wrong_bias(name, monkeypatch):
    """Its forward half runs on the CPU (FlexAttention has no CPU backward): within 1e-5 of SDPA for every
    encoder with an additive bias, and far from it when the score_mod reads the offsets backwards."""
    from poslab.nn.kernels import flex

    if not flex.AVAILABLE:
        pytest.skip("this torch has no FlexAttention")
    small = dict(length=48, heads=2, head_dim=16, device="cpu", backward=False)
    assert gpu_check.bias_encoders() and gpu_check.flex_error(name, torch.float32, **small) <= 1e-5

    def backwards(values, length_q):
        return lambda score, b, h, q, k: score + values[h, q - k + length_q - 1]

    def transposed(bias):
        return lambda score, b, h, q, k: score + bias[0, h, k, q]

    monkeypatch.setattr(flex, "offset_score_mod", backwards)
    monkeypatch.setattr(flex, "dense_score_mod", transposed)
    assert gpu_check.flex_error(name, torch.float32, **small) > 1e-2


def test_checks_past_the_time_budget_are_listed_as_not_run(capsys):
    assert gpu_check.main(["--dry-run", "--only", "flex", "memory", "--budget", "0"]) == 1
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")][1:]  # after the header
    assert rows == [f"| {part} | not run | the 0 s budget was spent | FAIL |" for part in ("flex", "memory")]


def test_model_flops_follow_palm_appendix_b():
    """6 N + 12 · layers · L · width, N without the token embedding (counted by hand for a 2-layer model)."""
    sizes = gpu_check.Sizes.dry_run()  # width 64, depth 2
    _, model = gpt2_small_on_cpu(sizes)
    d, hidden, vocab = 64, 256, 50304
    per_block = 2 * 2 * d + (3 * d * d + 3 * d) + (d * d + d) + (d * hidden + hidden) + (hidden * d + d)
    weights = 2 * per_block + 2 * d + vocab * d  # blocks, final norm, output head (untied)
    assert gpu_check.flops_per_token(model, sizes, 64) == 6 * weights + 12 * 2 * 64 * d


def gpt2_small_on_cpu(sizes):
    return gpu_check.gpt2_small("none", sizes, sizes.length, 1)


@pytest.mark.slow
def test_the_whole_dry_run_trains_every_case(capsys, monkeypatch):
    """Without wandb, litdata or datasets, as on a GPU machine given only the wheels `make gpu-wheels` writes
    (W&B is off there; the data are the embedded ones)."""
    import sys

    for lazy in ("wandb", "litdata", "datasets", "av"):  # imported only where a run asks for them
        monkeypatch.setitem(sys.modules, lazy, None)  # `import wandb` raises ImportError
    assert gpu_check.main(["--dry-run"]) == 0
    out = capsys.readouterr().out
    trained = [line for line in out.splitlines() if line.startswith("| train |")]
    assert len(trained) == len(gpu_check.TRAIN_CASES) and all(line.endswith("| ok |") for line in trained)


def test_a_case_that_raises_is_one_failed_row_and_the_other_cases_still_run(capsys, monkeypatch):
    """On the H200, Inductor refused FlexAttention's default tiles (an error whose message opens with a blank
    line): the table still comes out, with that case failed in one line."""
    real = gpu_check.gpt2_small

    def refuses_alibi(name, *args, **kwargs):
        if name == "alibi":
            raise RuntimeError("\nNo valid triton configs. OutOfMemoryError: out of resource | Required: 245760")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(gpu_check, "gpt2_small", refuses_alibi)
    assert gpu_check.main(["--dry-run", "--only", "speed", "memory"]) == 1
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| speed") or
            line.startswith("| memory")]  # fmt: skip
    failed = [row for row in rows if row.endswith("| FAIL |")]
    assert failed[0] == ("| speed | alibi L=64 B=2 | RuntimeError: No valid triton configs. OutOfMemoryError: out "
                         "of resource / Required: 245760 | FAIL |")  # fmt: skip
    assert all(row.startswith("| memory") and "alibi: RuntimeError" in row for row in failed[1:])
    assert len(failed) == 1 + len(gpu_check.Sizes.dry_run().memory_lengths)
    assert sum(row.endswith("| ok |") for row in rows) == len(gpu_check.SPEED_ENCODERS) - 1


def test_a_part_that_raises_is_one_failed_row(capsys, monkeypatch):
    def broken(sizes):
        raise ValueError("the bias has no offsets")

    monkeypatch.setattr(gpu_check, "memory_rows", broken)
    assert gpu_check.main(["--dry-run", "--only", "memory"]) == 1
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| memory")]
    assert rows == ["| memory | error | ValueError: the bias has no offsets | FAIL |"]
