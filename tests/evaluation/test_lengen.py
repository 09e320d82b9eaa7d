"""Length-generalisation bookkeeping, with the model replaced by a probe."""

from __future__ import annotations

import torch

from poslab.encoders import build_encoder
from poslab.evaluation.lengen import evaluate_lengths
from poslab.nn import Transformer


def backbone(name: str, **options) -> Transformer:
    return Transformer(build_encoder(name, dim=16, num_heads=2, **options), dim=16, depth=1, num_heads=2, causal=True)


def probe(model: Transformer):
    """A measure that runs the backbone at the length and reports which encoder ran."""

    def measure(multiple: int) -> dict[str, float]:
        length = 8 * multiple
        model(torch.randn(1, length, 16), torch.arange(length))
        enc = model.encoder
        return {"loss": float(multiple), "factor": getattr(getattr(enc, "scaling", None), "factor", 0.0)}

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
    assert set(metrics) == {"lengen/loss@1x", "lengen/loss@2x", "lengen/factor@1x", "lengen/factor@2x"}


def test_a_learned_table_records_why_it_cannot_run():
    model = backbone("learned", max_len=8)
    result = evaluate_lengths(model, probe(model), 8, [1, 2, 4], [])
    assert set(result.metrics()) == {"lengen/loss@1x", "lengen/factor@1x"}
    notes = [row["note"] for row in result.rows]
    assert notes[0] is None and "past encoder.max_len=8" in notes[1]
    assert result.series("loss")["base"] == [1.0, None, None]
