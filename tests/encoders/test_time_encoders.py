"""Timestamp encoders and composite encoders."""

from __future__ import annotations

import math

import pytest
import torch

from poslab.config.composition import compose
from poslab.encoders import available_encoders, build_encoder, build_encoder_in_context
from poslab.encoders.cyclic import cyclic_features
from poslab.errors import ConfigError, PoslabError
from poslab.positions import Positions
from tests.positions.test_timestamps import seconds

TIME_ENCODERS = ["calendar", "timefeatures", "cyclic", "time2vec"]


def test_time_encoders_are_registered_for_timeseries_only():
    assert set(TIME_ENCODERS) <= set(available_encoders("timeseries"))
    assert not set(TIME_ENCODERS) & set(available_encoders("text"))
    assert {"sinusoidal", "learned", "rope", "alibi", "none"} <= set(available_encoders("timeseries"))


@pytest.mark.parametrize("name", TIME_ENCODERS)
def test_same_time_same_embedding_other_time_other_embedding(name):
    torch.manual_seed(0)
    enc = build_encoder_in_context(name, dim=16, num_heads=2, options={}, context={"step_seconds": 1800})
    t = seconds("2016-07-01 10:00", "2016-07-01 10:00", "2016-07-02 13:30")
    out = enc.encode_input(torch.zeros(1, 3, 16), t)[0]
    assert name == "time2vec" or torch.allclose(out[0], out[1])  # time2vec's trend term is relative
    assert not torch.allclose(out[0], out[2])


def test_calendar_tables_and_minute_buckets():
    hourly = build_encoder("calendar", dim=8, num_heads=1, step_seconds=3600)
    quarter = build_encoder("calendar", dim=8, num_heads=1, step_seconds=900)
    assert "minute" not in hourly.fields and "minute" in quarter.fields
    t = seconds("2016-07-01 10:00", "2016-07-01 10:14", "2016-07-01 10:15")
    out = quarter.encode_input(torch.zeros(1, 3, 8), t)[0]
    assert torch.allclose(out[0], out[1]) and not torch.allclose(out[1], out[2])  # minute // 15
    assert all(p.requires_grad for p in quarter.parameters())  # learned by default
    fixed = build_encoder("calendar", dim=8, num_heads=1, embedding="fixed")
    assert not any(p.requires_grad for p in fixed.parameters())


def test_cyclic_features_are_cyclic():
    """23:00 and 00:00 are neighbours (unlike the linear GluonTS hour feature)."""
    a, b, c = cyclic_features(seconds("2016-07-01 23:00", "2016-07-02 00:00", "2016-07-02 12:00"), [86_400], 1)
    assert (a - b).norm() < (a - c).norm()
    assert torch.allclose(
        cyclic_features(seconds("2016-07-01 06:00"), [86_400], 1)[0], torch.tensor([1.0, 0.0]), atol=1e-6
    )
    with pytest.raises(ConfigError, match="unknown period 'month'"):
        build_encoder("cyclic", dim=8, num_heads=1, periods=["month"])


def test_time2vec_has_one_linear_and_k_periodic_terms():
    enc = build_encoder("time2vec", dim=8, num_heads=1, k=4)
    t = seconds("2016-07-01 00:00", "2016-07-02 00:00")
    features = enc.features(t).detach()
    assert features.shape == (2, 5)
    assert features[1, 0] - features[0, 0] == pytest.approx(enc.linear[0].item())  # one day later
    assert (features[:, 1:].abs() <= 1).all()
    torch.testing.assert_close(enc.omega.detach()[-1], torch.tensor(2 * math.pi / 365.25))


def test_composite_applies_every_member_on_its_own_field():
    cfg = compose(["modality=timeseries", "encoder=rope+calendar"])
    assert set(cfg.encoder) == {"name", "rope", "calendar"}
    enc = build_encoder_in_context(
        "rope+calendar", dim=16, num_heads=2, options={}, context={"max_len": 8, "step_seconds": 3600}
    )
    assert enc.name == "rope+calendar" and set(enc.hooks()) == {"encode_input", "rotate"}  # the members' hooks
    pos = Positions(steps=torch.arange(3), times=seconds("2016-07-01 00:00", "2016-07-01 01:00", "2016-07-01 02:00"))
    x, q = torch.zeros(1, 3, 16), torch.randn(1, 2, 3, 8)
    torch.testing.assert_close(enc.encode_input(x, pos), enc.members["calendar"].encode_input(x, pos))
    torch.testing.assert_close(enc.rotate(q, pos), enc.members["rope"].rotate(q, pos))
    assert enc.attention_bias(pos, pos) is None
    with pytest.raises(PoslabError, match="pass a Positions"):
        enc.encode_input(x, torch.arange(3))
    assert enc.extended("yarn", 2.0).members["rope"].scaling.type == "yarn"


def test_composite_biases_add_up():
    enc = build_encoder("alibi+t5", dim=16, num_heads=2)
    torch.nn.init.normal_(enc.members["t5"].bias.weight)
    pos = Positions(steps=torch.arange(5))
    expected = enc.members["alibi"].attention_bias(pos, pos) + enc.members["t5"].attention_bias(pos, pos)
    torch.testing.assert_close(enc.attention_bias(pos, pos), expected)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("rope+rope", "distinct encoders"),
        ("rope+sincos2d", "does not fit modality 'timeseries'"),
        ("rope+", "distinct"),
    ],
)
def test_bad_composites_are_clear_errors(name, message):
    with pytest.raises(ConfigError, match=message):
        compose(["modality=timeseries", f"encoder={name}"])
