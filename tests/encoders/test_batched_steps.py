"""Per-sample positions ``[B, L]`` (randomized positions, packed sequences) against the plain ``[L]`` path: every
encoder that reads ``steps`` in its query or key hook gives each sample of a batch what it gives that sample's
positions alone. B = H = 2, so a factor laid out ``[B, L]`` where ``[B, 1, L]`` is meant broadcasts silently over
the heads instead of the batch."""

from __future__ import annotations

import pytest
import torch

from poslab.encoders import available_encoders, build_encoder
from poslab.encoders.registry import encoder_class

OPTIONS = {
    "gemma3": {"max_len": 64},
    "rnope": {"max_len": 64},
    "rope_clipped": {"max_len": 64},
    "temperature": {"floor_scale": 2, "attn_scale": 0.5},
}
STEP_ROTATIONS = [
    n
    for n in available_encoders()
    if encoder_class(n).reads == "steps"
    and any(encoder_class(n).uses(h) for h in ("rotate", "rotate_query", "rotate_key"))
]


def encoders(name):
    enc = build_encoder(name, dim=32, num_heads=2, **OPTIONS.get(name, {}))
    yield enc
    if name == "rnope":  # the NoPE layers' swan log scaling reads the steps as well
        yield enc.extended("swan", 2.0).for_layer(3)


def test_the_encoders_that_turn_or_scale_by_steps_are_found():
    assert {"temperature", "xpos", "rope", "rnope", "gemma3", "drope"} <= set(STEP_ROTATIONS)


@pytest.mark.parametrize("name", STEP_ROTATIONS)
def test_batched_steps_give_each_sample_its_own_rotation_and_scale(name):
    torch.manual_seed(0)
    steps = torch.stack((torch.arange(6), torch.arange(6) * 3 + 5))  # [B, L]
    x = torch.randn(2, 2, 6, 16)  # [B, H, L, Dh]
    for enc in encoders(name):
        for hook in (enc.rotate_query, enc.rotate_key):
            batched = hook(x, steps)
            assert batched.shape[:-1] == x.shape[:-1]  # a polar encoder (PoPE) widens queries and keys
            for b in range(2):
                torch.testing.assert_close(batched[b], hook(x[b : b + 1], steps[b])[0], rtol=1e-5, atol=1e-6)
