"""``gemma3`` against the Gemma 3 report (§2.1-2.2): 5 local layers (sliding window, RoPE base 10k) to 1 global
(every token, RoPE base 1M), in what each layer's attention computes, and the context extension on the global
layers alone."""

from __future__ import annotations

import math

import pytest
import torch

from poslab.encoders import build_encoder, build_encoder_in_context
from poslab.errors import ConfigError
from tests.encoders.test_attention_computes import (
    DIM,
    HEADS,
    LENGTH,
    check_layers,
    model_with,
    outside_window,
    rotary_scores,
)


def interpolated_scores(q, k, base: float, factor: float):
    """RoPE (half layout) with positions divided by ``factor`` (Chen et al. 2023, positional interpolation)."""
    d, length = q.shape[-1], q.shape[-2]
    half = d // 2
    qc, kc = torch.complex(q[..., :half], q[..., half:]), torch.complex(k[..., :half], k[..., half:])
    theta = base ** (-2.0 * torch.arange(half, dtype=torch.float64) / d)
    offset = (torch.arange(length)[:, None] - torch.arange(length)[None, :]).double() / factor
    rotation = torch.polar(torch.ones(length, length, half, dtype=torch.float64), offset[..., None] * theta)
    return torch.einsum("bhnj,bhmj,nmj->bhnm", qc, kc.conj(), rotation).real / math.sqrt(d)


def gemma(**options):
    defaults = {"base": 100.0, "global_base": 10000.0, "window": 3}
    return build_encoder("gemma3", dim=DIM, num_heads=HEADS, **{**defaults, **options})


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("global_every", [6, 2])
def test_local_layers_are_windowed_rope_at_their_base_and_global_layers_see_every_token_at_theirs(global_every, layout):
    hidden = outside_window(LENGTH, 3, causal=True)

    def scores_of_layer(index):
        if (index + 1) % global_every == 0:
            return lambda q, k: rotary_scores(q, k, 10000.0, layout)
        return lambda q, k: rotary_scores(q, k, 100.0, layout).masked_fill(hidden, float("-inf"))

    model = model_with(gemma(global_every=global_every, layout=layout), depth=6)
    check_layers(model, scores_of_layer, causal=True)


def test_an_extension_rescales_the_global_layers_only():
    encoder = gemma(max_len=LENGTH).extended("linear", 2.0)
    hidden = outside_window(LENGTH, 3, causal=True)

    def scores_of_layer(index):
        if index == 5:
            return lambda q, k: interpolated_scores(q, k, 10000.0, 2.0)
        return lambda q, k: rotary_scores(q, k, 100.0, "half").masked_fill(hidden, float("-inf"))

    check_layers(model_with(encoder, depth=6), scores_of_layer, causal=True)


def test_its_defaults_as_constructed():
    encoder = build_encoder_in_context("gemma3", dim=DIM, num_heads=HEADS, options={}, context={"max_len": 64})
    assert (encoder.base, encoder.global_base, encoder.global_every) == (10000.0, 1_000_000.0, 6)
    assert encoder.attention_window() == 16 and encoder.global_layers.attention_window() is None
    assert [encoder.for_layer(i) is encoder.global_layers for i in range(12)] == [False] * 5 + [True] + [False] * 5 + [
        True
    ]
    with pytest.raises(ConfigError, match="gemma3: window=None is a quarter of max_len"):
        build_encoder("gemma3", dim=DIM, num_heads=HEADS)


def test_local_global_evaluates_gemma3_with_the_extension_gemma_3_ships():
    """The experiment's length study extends gemma3 by positional interpolation of its global layers (factor 8
    at 8x, the report's 32K -> 128K recipe) and states what it expects of it."""
    from poslab.config.composition import compose
    from poslab.encoders import build_encoder_in_context
    from poslab.modalities.text.lengen import usable_extensions

    cfg = compose(["experiment=local_global", "encoder=gemma3"])
    options = {k: v for k, v in cfg.encoder.items() if k != "name"}
    encoder = build_encoder_in_context("gemma3", dim=DIM, num_heads=HEADS, options=options,
                                       context={"max_len": cfg.data.context})  # fmt: skip
    assert "linear" in usable_extensions(encoder, list(cfg.eval.rope_scaling))
    assert "gemma3: lengen/loss@8x/linear < lengen/loss@8x" in cfg.expect
