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


@pytest.mark.parametrize(("fraction", "factor"), [(0.0, None), (0.7499, None), (0.75, 0.0), (0.7625, 1.0), (0.8, 2.0),
                                                  (0.99, 2.0)])  # fmt: skip
def test_the_recalibration_warms_up_to_its_own_rate_then_holds_it(fraction, factor):
    """The reference's recalibration (constant after a 10 % warmup): recalibrate 0.25 starts at 0.75, its warmup
    is 0.1 of it (to 0.775), the rate 2 × optim.lr; before the drop the run's schedule (None)."""
    encoder = build_encoder("drope", dim=DIM, num_heads=HEADS, recalibrate=0.25, recalibrate_lr=2.0)
    got = encoder.learning_rate_factor(fraction)
    assert got == (None if factor is None else pytest.approx(factor))
    kept = build_encoder("drope", dim=DIM, num_heads=HEADS, recalibrate=0.25, recalibrate_lr=None)
    assert kept.learning_rate_factor(fraction) is None  # null: the run's schedule throughout


def test_a_run_recalibrates_at_its_own_rate_after_the_drop(tiny_text, monkeypatch):
    """8 steps, the drop at step 4 (fraction 0.5), half the recalibration to warm up: the optimiser steps with
    the one-cycle schedule's rates, then 0, ½, 1, 1 × optim.lr (the one-cycle rate there would be a few %)."""
    rates: list[float] = []
    original = torch.optim.AdamW.step

    def step(self, *args, **kwargs):
        rates.append(self.param_groups[0]["lr"])
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", step)
    overrides = [*tiny_text, "encoder=drope", "encoder.recalibrate=0.5", "encoder.recalibrate_warmup=0.5",
                 "optim.lr=0.001", "trainer.max_steps=8", "eval.multiples=[1]"]  # fmt: skip
    train(compose(overrides))
    assert rates[4:] == pytest.approx([0.0, 5e-4, 1e-3, 1e-3])
    assert rates[:4] != pytest.approx([1e-3] * 4) and max(rates[:4]) <= 1e-3 + 1e-12  # the run's own schedule
