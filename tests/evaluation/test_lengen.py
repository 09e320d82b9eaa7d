"""Length-generalisation bookkeeping, with the model replaced by a probe."""

from __future__ import annotations

import torch

from poslab.encoders import build_encoder
from poslab.modalities.text.lengen import as_generated, evaluate_lengths, prefix_ends
from poslab.nn import Transformer
from poslab.positions import Positions


def backbone(name: str, **options) -> Transformer:
    return Transformer(build_encoder(name, dim=16, num_heads=2, **options), dim=16, depth=1, num_heads=2, causal=True)


def probe(model: Transformer):
    """A measure that runs the backbone at the length and reports which encoder ran, and how."""

    def measure(multiple: int, generated: bool) -> dict[str, float]:
        length = 8 * multiple
        model(torch.randn(1, length, 16), torch.arange(length))
        enc = model.encoder
        factor = getattr(getattr(enc, "scaling", None), "factor", 0.0)
        return {"loss": float(multiple), "factor": factor, "generated": float(generated)}

    return measure


def test_rope_gets_one_curve_per_extension_with_factor_equal_to_the_multiple():
    model = backbone("rope", max_len=8)
    trained = model.encoder
    result = evaluate_lengths(model, probe(model), 8, [1, 2, 4], ["linear", "yarn"])
    metrics = result.metrics()
    assert metrics["lengen/loss@1x"] == 1.0 and metrics["lengen/loss@4x"] == 4.0
    assert metrics["lengen/factor@2x/yarn"] == 2.0 and metrics["lengen/factor@4x/linear"] == 4.0
    assert metrics["lengen/factor@1x/yarn"] == 1.0  # 1x is the trained model itself
    assert model.encoder is trained  # restored after every extension
    assert result.series("loss")["yarn"] == [1.0, 2.0, 4.0]


def test_encoders_without_extensions_get_only_the_base_curve():
    model = backbone("alibi")
    metrics = evaluate_lengths(model, probe(model), 8, [1, 2], ["linear", "yarn"]).metrics()
    assert {k.split("@")[0] for k in metrics} == {"lengen/loss", "lengen/factor", "lengen/generated"}
    assert all("/" not in k.split("@")[1] for k in metrics)  # no extension curves


def test_a_learned_table_records_why_it_cannot_run():
    model = backbone("learned", max_len=8)
    result = evaluate_lengths(model, probe(model), 8, [1, 2, 4], [])
    assert set(result.metrics()) == {"lengen/loss@1x", "lengen/factor@1x", "lengen/generated@1x"}
    notes = [row["note"] for row in result.rows]
    assert notes[0] is None and "past encoder.max_len=8" in notes[1]
    assert result.series("loss")["base"] == [1.0, None, None]


def test_dynamic_ntk_keeps_factor_1_and_is_scored_as_in_generation():
    """Its scale follows the length it processes: passing the multiple as factor too would scale twice
    (an NTK ratio of 3, 13, 57 at 2x, 4x, 8x); and a whole window at once would make it NTK at factor m."""
    model = backbone("rope", max_len=8)
    metrics = evaluate_lengths(model, probe(model), 8, [1, 2, 8], ["ntk", "dynamic"]).metrics()
    assert metrics["lengen/factor@8x/dynamic"] == 1.0 and metrics["lengen/generated@8x/dynamic"] == 1.0
    assert metrics["lengen/factor@8x/ntk"] == 8.0 and metrics["lengen/generated@8x/ntk"] == 0.0
    assert metrics["lengen/generated@8x"] == 0.0


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
