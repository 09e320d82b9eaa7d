"""``drope`` against Gelberg et al. 2026 (§5.1): RoPE's attention while training up to the last ``recalibrate``
of the steps, attention without positions after it and whenever the model is evaluated; the trainer tells it
the fraction done, a resumed run too."""

from __future__ import annotations

import pytest
import torch

from poslab.config.composition import compose
from poslab.encoders import build_encoder
from poslab.encoders.drope import DroPE
from poslab.run.train import train
from tests.encoders.test_attention_computes import DIM, HEADS, check_layers, model_with, plain_scores, rotary_scores


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize(("progress", "rotated"), [(0.0, True), (0.7, True), (0.75, False), (0.9, False)])
def test_training_attention_is_ropes_until_the_last_fraction_then_has_no_position(progress, rotated, layout):
    encoder = build_encoder("drope", dim=DIM, num_heads=HEADS, base=100.0, recalibrate=0.25, layout=layout)
    encoder.train_progress(progress)
    model = model_with(encoder, depth=2)
    scores = (lambda q, k: rotary_scores(q, k, 100.0, layout)) if rotated else plain_scores
    check_layers(model, lambda _: scores, causal=True)


def test_an_evaluated_model_has_no_position_whatever_the_progress():
    encoder = build_encoder("drope", dim=DIM, num_heads=HEADS, base=100.0)
    model = model_with(encoder, depth=2).eval()
    check_layers(model, lambda _: plain_scores, causal=True)


def test_the_trainer_tells_it_each_steps_fraction_and_a_resumed_run_continues_the_count(tiny_text, monkeypatch):
    seen: list[float] = []
    original = DroPE.train_progress

    def record(self, fraction):
        seen.append(fraction)
        original(self, fraction)

    monkeypatch.setattr(DroPE, "train_progress", record)
    overrides = [*tiny_text, "encoder=drope", "encoder.recalibrate=0.5", "trainer.max_steps=4", "eval.multiples=[1]"]
    summary = train(compose(overrides))
    assert seen == [0.0, 0.25, 0.5, 0.75]
    seen.clear()
    train(compose([*overrides, "trainer.max_steps=6", f"resume={summary['run_dir']}"]))
    assert seen == pytest.approx([4 / 6, 5 / 6])  # from the step it reached, on the new length
    assert torch.isfinite(torch.tensor(summary["metrics"]["test/loss"]))
