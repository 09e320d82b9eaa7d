"""The public encoder API: build_encoder / available_encoders and the protocol."""

from __future__ import annotations

import pytest
import torch

from poslab.encoders import HOOKS, PositionEncoder, available_encoders, build_encoder, encoder_class
from poslab.errors import ConfigError, PoslabError
from poslab.positions import POSITION_FIELDS, Positions

VISION = available_encoders("vision")


#: What the data tells encoders: a 4x4 patch grid, a 64-token context, 4 frames.
SAMPLE_CONTEXT = {"grid_size": (4, 4), "max_len": 64, "frames": 4}


def build(name: str, dim: int = 32, num_heads: int = 2) -> PositionEncoder:
    """A registered encoder with the options :data:`SAMPLE_CONTEXT` fills."""
    from poslab.encoders import build_encoder_in_context, encoder_defaults

    defaults = encoder_defaults(name)
    return build_encoder_in_context(name, dim=dim, num_heads=num_heads, options=defaults, context=SAMPLE_CONTEXT)


def sample_positions(length: int = 16, facts: bool = False) -> Positions:
    """16 tokens with every ``Positions`` field a data module may fill: steps, a 4x4 grid, hourly stamps,
    and 4 frames of a 2x2 grid; with ``facts``, the plain-Python facts the data states too."""
    coords = torch.tensor([[r, c] for r in range(4) for c in range(4)], dtype=torch.float32)
    coords3d = torch.tensor([[t, r, c] for t in range(4) for r in range(2) for c in range(2)], dtype=torch.float32)
    times = 1_467_331_200 + 3600 * torch.arange(length)  # hourly from 2016-07-01
    stated = {"steps_start": 0, "steps_end": length, "coords_grid": (4, 4), "coords3d_grid": (4, 2, 2)}
    return Positions(
        steps=torch.arange(length), coords=coords, times=times, coords3d=coords3d, **(stated if facts else {})
    )


def test_vision_encoders_are_registered():
    assert {"none", "sincos2d", "learned2d", "rope2d", "rope2d_mixed"} <= set(VISION)


def test_available_encoders_are_the_registered_modules_sorted_and_filtered_by_modality():
    """Every ``@register_encoder("...")`` in the package's sources (a YAML only where one differs), sorted;
    a modality's list holds exactly the encoders that declare that modality or declare none (fit all)."""
    import re
    from pathlib import Path

    import poslab.encoders
    from poslab.config.files import config_dir

    sources = Path(poslab.encoders.__file__).parent.glob("*.py")
    declared = {n for p in sources for n in re.findall(r'@register_encoder\("([^"]+)"\)', p.read_text())}
    assert len(declared) > 10
    from poslab.entry_points import entry_points

    plugins = {ep.value for ep in entry_points("poslab.encoders")}
    added = [n for n in available_encoders() if n not in declared]  # by installed plugins only
    assert all(encoder_class(n).__module__ in plugins for n in added), added
    assert [n for n in available_encoders() if n in declared] == sorted(declared)
    assert {p.stem for p in (config_dir() / "encoder").glob("*.yaml")} <= declared
    provided = {"text": {"steps"}, "vision": {"coords"}, "timeseries": {"steps", "times"}}  # what their data gives
    offered = {"text": {"longer_rows"}, "vision": set(), "timeseries": set()}  # what their training does for one
    for modality, fields in provided.items():
        fitting = [
            n
            for n in available_encoders()
            if encoder_class(n).reads in (None, *fields) and set(encoder_class(n).needs) <= offered[modality]
        ]  # reads None: every modality
        assert available_encoders(modality) == fitting, modality
    assert "longrope2" in available_encoders("text") and "longrope2" not in available_encoders("timeseries")
    assert "rope2d" not in available_encoders("text") and "rope" not in VISION and "none" in VISION
    assert {"cyclic", "rope", "alibi"} <= set(available_encoders("timeseries"))


def test_an_encoder_fits_every_modality_that_provides_what_it_reads(tmp_path, monkeypatch):
    """A new modality whose data provides steps gets every 1D encoder that needs nothing more of its training,
    with no edit to any encoder; one whose training offers longer rows gets LongRoPE2 too."""
    import shutil

    from poslab.config.files import config_dir

    configs = tmp_path / "configs"
    shutil.copytree(config_dir(), configs)
    (configs / "modality" / "audio.yaml").write_text("positions: [steps]\n")
    monkeypatch.setenv("POSLAB_CONFIG_DIR", str(configs))
    one_d = [n for n in available_encoders() if encoder_class(n).reads in (None, "steps")]
    assert available_encoders("audio") == [n for n in one_d if not encoder_class(n).needs]
    assert "rope" in available_encoders("audio") and "sincos2d" not in available_encoders("audio")
    assert "longrope2" not in available_encoders("audio")
    (configs / "modality" / "speech.yaml").write_text("positions: [steps]\noffers: [longer_rows]\n")
    assert available_encoders("speech") == one_d


def test_unknown_encoder_lists_valid_names():
    with pytest.raises(ConfigError, match="unknown encoder 'rop3' .*valid: .*rope2d"):
        build_encoder("rop3", dim=32, num_heads=2)


def test_unknown_option_names_the_closest():
    with pytest.raises(ConfigError, match="has no option 'bas' \\(did you mean 'base'\\?\\)"):
        build_encoder("rope2d", dim=32, num_heads=2, bas=10.0)


def test_dim_must_split_into_heads():
    with pytest.raises(ConfigError, match="not divisible"):
        build_encoder("none", dim=30, num_heads=4)


@pytest.mark.parametrize("name", available_encoders())
def test_every_encoder_follows_the_protocol(name):
    """Hooks keep shapes; plain tensors and Positions give the same result."""
    enc = build(name)
    assert isinstance(enc, PositionEncoder) and enc.name == name
    assert set(enc.hooks()) <= set(HOOKS)
    cls = encoder_class(name)
    assert cls.reads is None or cls.reads in POSITION_FIELDS
    pos = sample_positions()
    plain = getattr(pos, cls.reads) if cls.reads else pos
    x = torch.randn(2, 16, 32)
    q = torch.randn(2, 2, 16, 16)
    torch.testing.assert_close(enc.encode_input(x, pos), enc.encode_input(x, plain))
    torch.testing.assert_close(enc.rotate(q, pos), enc.rotate(q, plain))
    assert enc.encode_input(x, pos).shape == x.shape
    assert enc.rotate(q, pos).shape == q.shape
    bias = enc.attention_bias(pos, pos)
    assert bias is None or bias.shape[-3:] == (2, 16, 16)


def test_missing_position_field_is_a_clear_error():
    enc = build("sincos2d")
    with pytest.raises(PoslabError, match="reads positions.coords, but the data provides only steps"):
        enc.encode_input(torch.zeros(1, 4, 32), Positions(steps=torch.arange(4)))


#: Encoders that carry no position inside the training context by design, and why.
BLIND_INSIDE_THE_CONTEXT = {
    "drope": "an evaluated DroPE model has dropped its rotation (test_drope.py checks it rotates in training)",
}


@pytest.mark.parametrize("name", available_encoders())
def test_every_encoder_but_none_makes_attention_see_the_token_order(name):
    """Without positions a (bidirectional) transformer is permutation-equivariant: moving the tokens moves
    the outputs. Every encoder must break that — with its parameters drawn at random, so a zero init passes
    nothing — and `none` must keep it."""
    from poslab.nn import Transformer

    torch.manual_seed(0)
    enc = build(name)
    for p in enc.parameters():
        torch.nn.init.normal_(p)
    model = Transformer(enc, dim=32, depth=1, num_heads=2).eval()
    x = torch.randn(1, 16, 32)
    perm = torch.randperm(16)
    pos = sample_positions()
    with torch.no_grad():
        moved = model(x[:, perm], pos)
        expected = model(x, pos)[:, perm]
    gap = (moved - expected).abs().max().item()
    if name in BLIND_INSIDE_THE_CONTEXT or name == "none":
        assert gap < 1e-5
    else:
        assert gap > 1e-3, f"{name} left the model blind to token order"


@pytest.mark.parametrize(
    "name", [n for n in available_encoders() if encoder_class(n).rotate is not PositionEncoder.rotate]
)
def test_every_rotation_keeps_each_vector_norm(name):
    """``rotate`` proper (a query-only scale, as SSMax's, is not a rotation)."""
    enc = build(name)
    q = torch.randn(2, 2, 16, 16)
    rotated = enc.rotate(q, sample_positions())
    torch.testing.assert_close(rotated.norm(dim=-1), q.norm(dim=-1), rtol=1e-5, atol=1e-5)
    assert not torch.allclose(rotated, q)  # it did rotate
