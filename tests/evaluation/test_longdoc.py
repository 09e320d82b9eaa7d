"""Long-document perplexity (eval.longdoc_lengths): sliding windows that score every held-out token once with
at least ``L - stride`` tokens of context (Press et al. 2022; yarn's eval/perplexity.py), logged per length."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from poslab.config.composition import compose, to_dict
from poslab.errors import ConfigError
from poslab.modalities.text.data import TextDataModule, sliding_windows
from poslab.modalities.text.task import LanguageModel
from poslab.positions import Positions
from poslab.run.train import train


@pytest.mark.parametrize(
    ("targets", "starts", "first"),
    [(20, [0, 4, 8, 12], [0, 4, 4, 4]), (22, [0, 4, 8, 12, 14], [0, 4, 4, 4, 6]), (5, [0], [0])],
)
def test_windows_of_eight_every_four_score_each_target_once(targets, starts, first):
    tokens = torch.arange(targets + 1)
    windows = sliding_windows(tokens, 8, 4)
    assert [int(w[0]) for w, _ in windows] == starts and [f for _, f in windows] == first
    scored = [int(t) for w, f in windows for t in w[1:][f:]]  # each window's scored targets
    assert scored == list(range(1, targets + 1))


def reference_nll(model, tokens: torch.Tensor, length: int, stride: int) -> float:
    """Hugging Face's "perplexity of fixed-length models" loop, with the last window moved back to a full one."""
    nll, count, previous_end, n = 0.0, 0, 0, len(tokens) - 1
    begins = list(range(0, n - length, stride)) + [n - length]
    for begin in begins:
        end = begin + length
        inputs, targets = tokens[begin:end][None], tokens[begin + 1 : end + 1][None].clone()
        targets[:, : previous_end - begin] = -100  # scored by the window before
        logits = model(inputs, Positions.consecutive(length))
        nll += F.cross_entropy(logits.transpose(1, 2), targets, ignore_index=-100, reduction="sum").item()
        count += int((targets != -100).sum())
        previous_end = end
    assert count == n
    return nll / count


def test_the_measure_is_the_reference_loop_and_a_run_logs_perplexity_per_length(tiny_text):
    overrides = [*tiny_text, "eval.longdoc_lengths=[16,48]", "eval.longdoc_tokens=300", "eval.longdoc_stride=8"]
    summary = train(compose(overrides))
    metrics = summary["metrics"]
    assert metrics["longdoc/ppl@16"] == pytest.approx(math.exp(metrics["longdoc/loss@16"]))
    assert {"longdoc/ppl@48", "longdoc/loss@48"} <= set(metrics)
    assert "longdoc/ppl" in summary["tables"] and "longdoc/ppl" in summary["figures"]
    cfg = compose(overrides)
    datamodule = TextDataModule(cfg.data, multiples=cfg.eval.multiples)
    datamodule.setup("fit")
    best = Path(summary["run_dir"]) / summary["checkpoints"]["best"]
    task = LanguageModel.load_from_checkpoint(best, map_location="cpu", weights_only=False).eval()
    with torch.no_grad():
        for length in (16, 48):
            expected = reference_nll(task, datamodule.splits["test"][:301], length, 8)
            assert metrics[f"longdoc/loss@{length}"] == pytest.approx(expected, rel=1e-5)


def test_long_document_perplexity_applies_to_corpora():
    with pytest.raises(ConfigError, match="eval.longdoc_lengths applies to corpora"):
        compose(["modality=text", "data=copy", "task.name=sequence", "eval.longdoc_lengths=[64]"])
    assert to_dict(compose(["modality=text"]))["eval"]["longdoc_lengths"] == []
