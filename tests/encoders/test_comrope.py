"""ComRoPE (Yu et al. 2025; reference: Longin-Yu/ComRoPE ``model.py``): the reference's angle matrices and
rotation, written out here from its ``ComRoPEAPAttention`` / ``ComRoPELDAttention.get_exponent_matrix`` and
``RoPESelfAttentionBase.get_rotation_matrix``, fed the encoder's own raw parameters."""

from __future__ import annotations

import pytest
import torch

from poslab.encoders import build_encoder, build_encoder_in_context
from poslab.errors import ConfigError


def reference_angle_matrices(freqs, variant: str, axes: int, multiplier=None) -> torch.Tensor:
    """``(heads, axes, blocks, b, b)``: P − Pᵀ, masked to blocks j ≡ i (mod N) (AP) or scaled by θ_ij (LD)."""
    skew = freqs - freqs.transpose(-1, -2)  # (heads, 1, blocks, b, b)
    if variant == "ld":
        return skew * multiplier  # multiplier (1, axes, blocks, 1, 1)
    mask = torch.zeros(axes, freqs.shape[2])
    for i in range(axes):
        mask[i, i::axes] = 1.0
    return skew.expand(-1, axes, -1, -1, -1) * mask.view(1, axes, -1, 1, 1)


def reference_rotation(angles, positions, head_dim: int) -> torch.Tensor:
    """``(len, heads, head_dim, head_dim)``: exp(Σ_i A_i x_i) per block, laid on the block diagonal."""
    b = angles.shape[-1]
    ln_r = (angles[None] * positions[:, None, :, None, None, None]).sum(dim=2)  # (len, heads, blocks, b, b)
    blocks = torch.matrix_exp(ln_r.double())
    out = torch.zeros(*blocks.shape[:2], head_dim, head_dim, dtype=torch.float64)
    for j in range(blocks.shape[2]):
        out[:, :, j * b : (j + 1) * b, j * b : (j + 1) * b] = blocks[:, :, j]
    return out


@pytest.mark.parametrize("variant", ["ld", "ap"])
def test_queries_turn_by_the_references_rotation_of_the_same_parameters(variant):
    """Head size 16, blocks of 4, a 4 × 4 training grid: the reference scales (row, col) to (i + ½)/4, the
    encoder to i/4; the common ½/4 cancels in every score (checked below), so it is added here."""
    torch.manual_seed(0)
    encoder = build_encoder("comrope", dim=32, num_heads=2, variant=variant, grid_size=(4, 4))
    coords = torch.tensor([[r, c] for r in range(4) for c in range(4)], dtype=torch.float32)
    x = torch.randn(1, 2, 16, 16)
    freqs = encoder.raw[0][:, None]  # (heads, 1, blocks, b, b), as the reference holds them
    multiplier = encoder.multiplier[0][None, :, :, None, None] if variant == "ld" else None
    angles = reference_angle_matrices(freqs.detach(), variant, 2, None if multiplier is None else multiplier.detach())
    shifted = reference_rotation(angles, (coords + 0.5) / 4, 16)  # the reference's positions
    plain = reference_rotation(angles, coords / 4, 16)
    want = torch.einsum("lhij,hlj->hli", plain, x[0].double())
    torch.testing.assert_close(encoder.rotate(x, coords)[0].double(), want, atol=1e-5, rtol=1e-5)
    # scores: the reference's (shifted) and the encoder's agree, as commuting rotations promise
    q, k = torch.einsum("lhij,hlj->hli", shifted, x[0].double()), want
    reference_scores = q @ torch.einsum("lhij,hlj->hli", shifted, x[0].flip(0).double()).transpose(-1, -2)
    scores = k @ torch.einsum("lhij,hlj->hli", plain, x[0].flip(0).double()).transpose(-1, -2)
    torch.testing.assert_close(scores, reference_scores, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("variant", ["ld", "ap"])
def test_its_angle_matrices_commute_so_scores_read_the_offset_alone(variant):
    encoder = build_encoder("comrope", dim=16, num_heads=1, variant=variant, grid_size=(4, 4))
    a = encoder.generators()[0]  # (axes, blocks, b, b)
    torch.testing.assert_close(a[0] @ a[1], a[1] @ a[0], atol=1e-5, rtol=1e-5)
    q, k = torch.randn(2, 1, 1, 1, 16).expand(2, 1, 1, 3, 16)
    coords = torch.tensor([[0.0, 0.0], [1.0, 3.0], [2.0, 6.0]])  # equal steps
    scores = encoder.rotate(q, coords) @ encoder.rotate(k, coords).transpose(-1, -2)
    torch.testing.assert_close(scores[0, 0, 0, 1], scores[0, 0, 1, 2], atol=1e-5, rtol=1e-5)


def test_axis_partition_gives_block_j_to_axis_j_mod_n():
    encoder = build_encoder("comrope", dim=16, num_heads=1, variant="ap", block_size=2, grid_size=(4, 4))
    a = encoder.generators()[0]  # (axes 2, blocks 8, 2, 2)
    moved = a.abs().sum(dim=(-1, -2)) > 0
    assert moved.tolist() == [[True, False] * 4, [False, True] * 4]


def test_the_reference_initialisation_and_one_set_per_layer():
    encoder = build_encoder_in_context("comrope", dim=64, num_heads=4, options={"init_std": 0.5},
                                       context={"grid_size": (4, 4), "depth": 3})  # fmt: skip
    assert encoder.raw.shape == (3, 4, 4, 4, 4) and encoder.multiplier.shape == (3, 2, 4)
    assert 0.4 < encoder.raw.std().item() < 0.6  # N(0, init_std²)
    assert not torch.equal(encoder.for_layer(0).generators(), encoder.for_layer(1).generators())


def test_too_few_blocks_for_the_axes_is_one_line():
    with pytest.raises(ConfigError, match="variant=ap gives each of the 2 axes its own blocks"):
        build_encoder("comrope", dim=8, num_heads=2, variant="ap", block_size=4, grid_size=(4, 4))
