"""Length generalisation: which passes the study runs, and generation-style scoring."""

from __future__ import annotations

import torch

from poslab.encoders import build_encoder
from poslab.modalities.text.lengen import LengthPass, as_generated, length_passes, prefix_ends
from poslab.nn import Transformer
from poslab.positions import Positions


def backbone(name: str, **options) -> Transformer:
    return Transformer(build_encoder(name, dim=16, num_heads=2, **options), dim=16, depth=1, num_heads=2, causal=True)


def plan(name: str, multiples, extensions, **options) -> dict[tuple[str, int], LengthPass]:
    encoder = build_encoder(name, dim=16, num_heads=2, **options)
    return {(p.variant, p.multiple): p for p in length_passes(encoder, multiples, extensions)}


def test_rope_gets_one_pass_per_extension_with_factor_equal_to_the_multiple():
    passes = plan("rope", [1, 2, 4], ["linear", "yarn"], max_len=8)
    assert passes[("base", 4)].factor is None  # the trained encoder
    assert passes[("yarn", 2)].factor == 2.0 and passes[("linear", 4)].factor == 4.0
    assert ("yarn", 1) not in passes  # 1x is the trained model itself: the base pass's row
    assert not any(p.generated for p in passes.values())


def test_encoders_without_extensions_get_only_the_base_passes():
    passes = plan("alibi", [1, 2], ["linear", "yarn"])
    assert list(passes) == [("base", 1), ("base", 2)]


def test_dynamic_ntk_keeps_factor_1_and_is_scored_as_in_generation():
    """Its scale follows the length it processes: passing the multiple as factor too would scale twice
    (an NTK ratio of 3, 13, 57 at 2x, 4x, 8x); and a whole window at once would make it NTK at factor m."""
    passes = plan("rope", [1, 2, 8], ["ntk", "dynamic"], max_len=8)
    assert passes[("dynamic", 8)].factor == 1.0 and passes[("dynamic", 8)].generated
    assert passes[("ntk", 8)].factor == 8.0 and not passes[("ntk", 8)].generated
    assert not passes[("base", 8)].generated


def test_prefixes_grow_by_an_eighth_from_the_training_context():
    assert prefix_ends(8, 16) == [8]
    ends = prefix_ends(200, 16)
    assert ends[0] == 16 and ends[-1] == 200 and ends == sorted(set(ends))
    assert all(b <= max(a + 1, a * 1.125) for a, b in zip(ends, ends[1:], strict=False))


def test_as_generated_scores_each_position_from_a_prefix_just_past_it():
    """Position t's logits come from a pass over t + 1 .. 1.125 (t + 1) tokens (the context at most, inside
    it), with consecutive steps from 0 that state the prefix's length."""
    context, length = 8, 70
    seen = []

    def forward(tokens, pos):
        assert pos.steps_start == 0 and pos.steps_end == tokens.shape[1] == pos.steps.shape[-1]
        seen.append(tokens.shape[1])
        return torch.full((tokens.shape[0], tokens.shape[1], 1), float(tokens.shape[1]))

    used = as_generated(forward, torch.zeros(2, length, dtype=torch.long), Positions.consecutive(length), context)
    used = used[0, :, 0]
    t = torch.arange(length)
    assert (used[:context] == context).all()
    assert (used[context:] >= t[context:] + 1).all() and (used[context:] <= 1.125 * (t[context:] + 1)).all()
    assert seen == prefix_ends(length, context)


def test_dynamic_rope_as_generated_differs_from_one_pass_except_at_the_end():
    """The last position sees the whole window either way; an earlier one past the context gets a smaller
    scale in generation than in one pass over the window; inside the context nothing is scaled."""
    torch.manual_seed(0)
    model = backbone("rope", max_len=8)
    model.encoder = model.encoder.extended("dynamic", 1.0)
    x = torch.randn(1, 64, 16)

    def forward(tokens, pos):  # the "tokens" are the embeddings of a backbone-only model
        return model(tokens, pos)

    whole = forward(x, Positions.consecutive(64))
    generated = as_generated(forward, x, Positions.consecutive(64), 8)
    torch.testing.assert_close(generated[:, -1], whole[:, -1])
    plain = backbone("rope", max_len=8)
    plain.load_state_dict(model.state_dict())
    torch.testing.assert_close(generated[:, :8], plain(x[:, :8], Positions.consecutive(8)))
    assert (generated[:, 20] - whole[:, 20]).abs().max() > 1e-3
