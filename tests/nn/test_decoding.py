"""Incremental decoding: a cached step computes what a full forward pass over the same tokens computes, for
every encoder that fits text (new ones join the parametrization by registering), past the training context,
with every context extension, and for the options that change which keys a query sees."""

from __future__ import annotations

import pytest
import torch

from poslab.encoders import available_encoders, encoder_class
from poslab.encoders.learned import PositionOutOfRange
from poslab.encoders.registry import build_encoder_in_context
from poslab.modalities.text.model import CausalLM
from poslab.positions import Positions

VOCAB, DIM, HEADS, DEPTH, CONTEXT = 13, 32, 4, 2, 8
CONTEXT_FACTS = {"max_len": CONTEXT, "causal": True}


def model_for(name: str, seed: int = 0, **options) -> CausalLM:
    torch.manual_seed(seed)
    encoder = build_encoder_in_context(name, dim=DIM, num_heads=HEADS, options=options, context=CONTEXT_FACTS)
    return CausalLM(encoder, vocab_size=VOCAB, dim=DIM, depth=DEPTH, num_heads=HEADS).eval()


def with_encoder(model: CausalLM, encoder) -> CausalLM:
    model.backbone.encoder = encoder
    return model


def full_logits(model: CausalLM, tokens: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(tokens, Positions.consecutive(tokens.shape[1]))


def cached_logits(model: CausalLM, tokens: torch.Tensor, steps: list[int]) -> list[torch.Tensor]:
    """Each step's logits, ``tokens`` fed ``steps[0]`` tokens (the prompt), then ``steps[1]``, … through one cache."""
    cache, start, out = model.new_cache(), 0, []
    with torch.no_grad():
        for size in steps:
            out.append(model(tokens[:, start : start + size], Positions.consecutive(size, start=start), cache=cache))
            start += size
    assert start == tokens.shape[1] and len(cache) == start
    return out


def prefix_logits(model: CausalLM, tokens: torch.Tensor, steps: list[int]) -> list[torch.Tensor]:
    """What each step should give: the full forward pass over every token up to the step's last, at the step's
    rows (a length-driven scaling sees the length generated so far, as in generation)."""
    ends = torch.tensor(steps).cumsum(0).tolist()
    return [full_logits(model, tokens[:, :end])[:, end - size :] for size, end in zip(steps, ends, strict=True)]


def longest(model: CausalLM, wanted: int) -> int:
    """``wanted``, or the training context for an encoder that represents no position past it (a learned table)."""
    try:
        full_logits(model, torch.zeros(1, wanted, dtype=torch.long))
    except PositionOutOfRange:
        return CONTEXT
    return wanted


def check_cached_equals_full(model: CausalLM, length: int = 3 * CONTEXT + 1) -> None:
    length = longest(model, length)
    tokens = torch.randint(0, VOCAB, (2, length), generator=torch.Generator().manual_seed(1))
    chunks = [5, 3, 1, length - 9] if length > 9 else [5, length - 5]  # steps of several tokens: their rows' masks
    for steps in ([3] + [1] * (length - 3), chunks):
        torch.testing.assert_close(cached_logits(model, tokens, steps), prefix_logits(model, tokens, steps),
                                   atol=1e-5, rtol=0)  # fmt: skip


TEXT_ENCODERS = available_encoders("text")


@pytest.mark.parametrize("name", TEXT_ENCODERS)
def test_cached_decoding_equals_the_full_forward_pass_past_the_training_context(name):
    check_cached_equals_full(model_for(name))


EXTENDED = [  # a searched extension's factors come from its search (LongRoPE: tested below with given factors)
    (n, kind)
    for n in TEXT_ENCODERS
    for kind in encoder_class(n).context_extensions
    if kind not in encoder_class(n).searched_extensions
]


@pytest.mark.parametrize(("name", "kind"), EXTENDED, ids=[f"{n}-{k}" for n, k in EXTENDED])
def test_every_context_extension_decodes_as_its_full_forward_pass(name, kind):
    """Dynamic NTK included: every key is rotated for the grown length at every step, as the full pass rotates
    it (keys cached already rotated would keep the length they were cached at: transformers#25104)."""
    model = model_for(name)
    check_cached_equals_full(with_encoder(model, model.backbone.encoder.extended(kind, 4.0)), length=4 * CONTEXT)


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("rope", {"window": 3}),  # a sliding window: the step's rows see the last W keys
        ("rope", {"layout": "interleaved", "rotary_fraction": 0.5}),
        ("gemma3", {"window": 4, "global_every": 2}),  # local and global layers: one bias per layer encoder
        ("rnope", {"nope_every": 2, "window": 5}),
        ("rnope", {"nope_every": 2, "log_scale_base": 4.0}),  # NoPE layers scale queries by the log of their place
        ("xpos", {"blockwise": True}),  # blocks of max_len: a query sees its block and the one before
        ("stickbreaking", {"attend_current": True, "remainder": False}),
        ("cope", {"npos_max": 4}),
        ("t5", {"num_buckets": 8, "max_distance": 6}),
        ("relative", {"max_distance": 3}),
        ("kerple", {"variant": "power"}),
        ("path", {"conv": False, "rank": 2}),
        ("fox", {"depth": DEPTH}),
        ("rope+ssmax", {}),  # a query scaled by its key count, which its place in the sequence gives
        ("path+fox", {}),
        ("alibi+fox", {}),  # an offset bias and a bias from the layer's input
        ("rope,none", {}),  # per layer
    ],
    ids=lambda value: str(value) if isinstance(value, str) else ",".join(f"{k}={v}" for k, v in value.items()),
)
def test_options_that_change_what_a_query_sees_decode_as_the_full_pass(name, options):
    check_cached_equals_full(model_for(name, **options))


def test_longrope_with_its_searched_factors_decodes_as_its_full_pass():
    model = model_for("rope")
    factors = torch.linspace(1.0, 4.0, DIM // HEADS // 2).tolist()
    check_cached_equals_full(with_encoder(model, model.backbone.encoder.with_long_factor(4.0, factors)), 4 * CONTEXT)


def test_a_cache_that_keeps_earlier_rows_under_dynamic_ntk_would_fail_the_check(monkeypatch):
    """The check can fail: dynamic NTK rescales every position as the sequence grows, so rows cached at a
    shorter length (Hugging Face's cache, transformers#25104) are not the rows of the grown sequence."""
    model = model_for("rope")
    model = with_encoder(model, model.backbone.encoder.extended("dynamic", 8.0))
    for block in model.backbone.blocks:  # sharper attention than the initialisation's, as a trained model's
        torch.nn.init.normal_(block.attn.qkv.weight, std=0.5)
    check_cached_equals_full(model, length=8 * CONTEXT)  # the decoder computes the whole prefix again: it holds
    monkeypatch.setattr(model.backbone, "length_dependent", lambda: False)
    tokens = torch.randint(0, VOCAB, (2, 8 * CONTEXT), generator=torch.Generator().manual_seed(1))
    steps = [3] + [1] * (tokens.shape[1] - 3)
    kept = torch.cat(cached_logits(model, tokens, steps), dim=1)
    assert (kept - torch.cat(prefix_logits(model, tokens, steps), dim=1)).abs().max() > 1e-3


def test_a_cache_follows_its_positions_and_refuses_a_structure_mask():
    model = model_for("alibi")
    cache = model.new_cache()
    tokens = torch.randint(0, VOCAB, (1, 6))
    with torch.no_grad():
        model(tokens[:, :4], Positions.consecutive(4), cache=cache)
        model(tokens[:, 4:], Positions.consecutive(2, start=4), cache=cache)
    assert len(cache) == 6 and cache.positions.steps_start == 0 and cache.positions.steps_end == 6
    assert cache.layers[0].keys.shape == (1, HEADS, 6, DIM // HEADS)
    assert cache.layers[0].inputs is None  # kept only for encoders that read the layer's inputs
    with pytest.raises(ValueError, match="without a structure mask"):
        model.backbone(torch.zeros(1, 2, DIM), Positions.consecutive(2), allowed=torch.ones(2, 2, dtype=torch.bool),
                       cache=model.new_cache())  # fmt: skip
