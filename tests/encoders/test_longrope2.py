"""``longrope2`` against Shang et al. 2025 (§3.2–3.3) and its reference: RoPE until the last ``extend`` of
training; there its factors are searched once on the model as trained, then training mixes windows of the
training context (original RoPE) with windows of the target length (the searched factors, the reference's
attention factor), which sequences past the training context keep in every evaluation."""

from __future__ import annotations

import math

import pytest
import torch

from poslab.config.composition import compose
from poslab.encoders import build_encoder
from poslab.encoders.longrope_search import CriticalSpace, SearchResult
from poslab.errors import ConfigError
from poslab.modalities.text.data import TextDataModule
from poslab.run.train import train
from tests.encoders.test_attention_computes import DIM, HEADS, LENGTH, check_layers, model_with, rotary_scores

D = DIM // HEADS  # 16 channels: 8 frequencies
FOUND = SearchResult(CriticalSpace.longrope2(4.0, 8).factors((3, 4.0, 4.5, 5.25, 6.0, 8.0)), 1.0, {}, 1, 3)


def longrope2(**options):
    return build_encoder("longrope2", dim=DIM, num_heads=HEADS, base=100.0, **{"factor": 4, **options})


def searched_scores(factors, a2):
    """a² Σ_j Re[q_j k_j* e^{i(n−m)θ_j/λ_j}] / √d (LongRoPE eq. 3; the reference's a = √(1 + ln s / ln L₀))."""

    def scores(q, k):
        half = D // 2
        qc, kc = torch.complex(q[..., :half], q[..., half:]), torch.complex(k[..., :half], k[..., half:])
        theta = 100.0 ** (-2.0 * torch.arange(half, dtype=torch.float64) / D) / torch.tensor(factors).double()
        offset = (torch.arange(LENGTH)[:, None] - torch.arange(LENGTH)[None, :]).double()
        rotation = torch.polar(torch.ones(LENGTH, LENGTH, half, dtype=torch.float64), offset[..., None] * theta)
        return a2 * torch.einsum("bhnj,bhmj,nmj->bhnm", qc, kc.conj(), rotation).real / math.sqrt(D)

    return scores


@pytest.mark.parametrize("training", [True, False])
def test_past_the_training_context_attention_rotates_by_the_searched_factors_within_it_as_rope(training):
    """12 tokens: past a training context of 6 (θ_i / λ_i, logits × 1 + ln 4 / ln 6); within one of 12, RoPE."""
    past = longrope2(max_len=6)
    past.take_search(FOUND)
    assert past.found == pytest.approx(FOUND.factors)
    a2 = 1 + math.log(4) / math.log(6)
    check_layers(model_with(past).train(training), lambda _: searched_scores(FOUND.factors, a2), causal=True)
    within = longrope2(max_len=LENGTH)
    within.take_search(FOUND)
    check_layers(
        model_with(within).train(training), lambda _: lambda q, k: rotary_scores(q, k, 100.0, "half"), causal=True
    )
    unsearched = longrope2(max_len=6)  # before its search: RoPE at every length
    check_layers(model_with(unsearched), lambda _: lambda q, k: rotary_scores(q, k, 100.0, "half"), causal=True)


def test_the_extension_asks_for_its_search_once_then_mixes_short_and_long_rows_by_their_share():
    encoder = longrope2(max_len=16, extend=0.25, short_share=0.3).train()
    encoder.train_progress(0.7)
    assert encoder.search_in_training() is None and encoder.training_multiple(700) == 1  # before the extension
    assert encoder.complete_from() == 0.75 and encoder.training_multiples() == (1, 4)
    encoder.train_progress(0.75)
    assert encoder.search_in_training() == ("longrope2", 4.0)
    encoder.take_search(FOUND)
    assert encoder.search_in_training() is None
    # step k is short where ⌊(k+1)·0.3⌋ > ⌊k·0.3⌋: 3, 6 and 9 of 0 … 9
    assert [encoder.training_multiple(k) for k in range(10)] == [4, 4, 4, 1, 4, 4, 1, 4, 4, 1]
    assert sum(encoder.training_multiple(k) == 1 for k in range(1000, 2000)) == 300
    encoder.eval()
    assert encoder.search_in_training() is None and encoder.training_multiple(3) == 1  # not training: nothing


@pytest.mark.parametrize(("fraction", "factor"), [(0.0, None), (0.7499, None), (0.75, 0.0), (0.7525, 0.05),
                                                  (0.755, 0.1), (0.8775, 0.05), (1.0, 0.0)])  # fmt: skip
def test_the_extension_warms_up_to_its_own_rate_then_decays_by_a_cosine(fraction, factor):
    """The reference's fine-tuning (nnscaler run.sh: warm-up over 40 of 2,250 steps, then cosine to 0): extend 0.25
    starts at 0.75, its warm-up is 0.02 of it (to 0.755), the peak 0.1 × optim.lr, half of it half-way through the
    rest ((0.755 + 1) / 2 = 0.8775)."""
    encoder = longrope2(max_len=16, extend=0.25)
    got = encoder.learning_rate_factor(fraction)
    assert got == (None if factor is None else pytest.approx(factor, abs=1e-12))
    assert longrope2(max_len=16, extend=0.25, extend_lr=None).learning_rate_factor(fraction) is None


def test_what_the_search_found_is_in_the_state_dict_and_survives_a_change_of_dtype():
    searched = longrope2(max_len=6)
    searched.take_search(FOUND)
    state = searched.to(torch.bfloat16).state_dict()
    assert state["critical_dim"].item() == 3 and state["hundredths"].tolist() == [0, 0, 0, 400, 450, 525, 600, 800]
    restored = longrope2(max_len=6)
    restored.load_state_dict(state)
    assert restored.found == pytest.approx(FOUND.factors, rel=1e-12) and restored.search_in_training() is None
    assert restored.frequencies(12)[0].tolist() == pytest.approx(
        (100.0 ** (-2 * torch.arange(8, dtype=torch.float64) / 16) / torch.tensor(FOUND.factors)).tolist()
    )


def test_a_run_searches_as_its_extension_starts_trains_on_long_rows_and_tests_a_checkpoint_after_it(
    tiny_text, monkeypatch
):
    drawn = []
    original = TextDataModule.long_windows

    def record(self, multiple, rows, step):
        drawn.append((multiple, rows, step))
        return original(self, multiple, rows, step)

    monkeypatch.setattr(TextDataModule, "long_windows", record)
    overrides = [*tiny_text, "encoder=longrope2", "encoder.extend=0.5", "trainer.max_steps=16", "data.tokenizer=bpe",
                 "data.vocab_size=300", "trainer.val_check_interval=4", "eval.multiples=[1,8]", "eval.rope_scaling=[]",
                 "eval.search_population=4", "eval.search_generations=1", "eval.search_tokens=256"]  # fmt: skip
    summary = train(compose(overrides))
    # the check before training, then the long steps of 8 … 15 (short: 9 and 13, ⌊(k+1)·0.3⌋ > ⌊k·0.3⌋)
    assert drawn == [(8, 1, 0)] + [(8, 1, k) for k in (8, 10, 11, 12, 14, 15)]
    assert summary["metrics"]["search/evaluated"] >= 2 and math.isfinite(summary["metrics"]["search/fitness"])
    best = torch.load(summary["run_dir"] + "/" + summary["checkpoints"]["best"], weights_only=False)
    assert best["global_step"] > 8  # validations at 4 and 8 precede the search: no best checkpoint from them
    assert best["state_dict"]["model.backbone.encoder.critical_dim"].item() in (0, 1)
    assert math.isfinite(summary["metrics"]["lengen/loss@8x"])


def test_it_trains_as_the_runs_encoder_on_a_corpus_only(tiny_text):
    generated = r"^data=copy generates sequences of the training length: it has no rows 8x the context to train on"
    with pytest.raises(ConfigError, match=generated):
        train(compose([*tiny_text, "encoder=longrope2", "task.name=sequence", "data=copy", "trainer.max_steps=2"]))
    layered = [*tiny_text, "encoder=longrope2,none", "trainer.max_steps=2"]
    with pytest.raises(ConfigError, match=r"encoder 'longrope2' trains on rows longer than the context: use it as"):
        train(compose(layered))


@pytest.mark.parametrize(("name", "options"), [("longrope2", {"extend": 0.25}), ("drope", {"recalibrate": 0.25})])
def test_no_checkpoint_before_the_encoder_is_complete_is_a_candidate_for_the_best(name, options, monkeypatch):
    """LongRoPE2 before its search, DroPE before its drop: not the model the run delivers, whatever its loss."""
    from types import SimpleNamespace

    from lightning.pytorch.callbacks import ModelCheckpoint

    from poslab.run.callbacks import RunCheckpoint

    saved = []
    monkeypatch.setattr(
        ModelCheckpoint, "_save_topk_checkpoint", lambda self, trainer, c: saved.append(trainer.global_step)
    )
    encoder = build_encoder(name, dim=DIM, num_heads=HEADS, **options)
    best = RunCheckpoint(dirpath="unused", filename="best", monitor="val/loss", mode="min")
    for step in (250, 500, 750, 751, 1000):
        trainer = SimpleNamespace(lightning_module=SimpleNamespace(encoder=encoder), global_step=step,
                                  estimated_stepping_batches=1000)  # fmt: skip
        best._save_topk_checkpoint(trainer, {})
    assert saved == [751, 1000]
