"""ViT: permutation invariance without positions, sensitivity with every 2D encoder."""

from __future__ import annotations

import pytest
import torch

from poslab.encoders import available_encoders
from poslab.encoders.grid import grid_coordinates
from poslab.modalities.vision.model import ViT
from tests.encoders.test_registry import build

PATCH, GRID = 4, 4


def permute_patches(images: torch.Tensor, perm: torch.Tensor) -> torch.Tensor:
    """Move image patches around: patch perm[i] goes to slot i (row-major)."""
    b, c = images.shape[:2]
    patches = (
        images.reshape(b, c, GRID, PATCH, GRID, PATCH)
        .permute(0, 2, 4, 1, 3, 5)
        .reshape(b, GRID * GRID, c, PATCH, PATCH)
    )
    patches = patches[:, perm].reshape(b, GRID, GRID, c, PATCH, PATCH).permute(0, 3, 1, 4, 2, 5)
    return patches.reshape(b, c, GRID * PATCH, GRID * PATCH)


def vit(name: str, pool: str) -> ViT:
    torch.manual_seed(0)
    model = ViT(
        build(name),
        in_chans=1,
        num_classes=10,
        patch_size=PATCH,
        dim=32,
        depth=2,
        num_heads=2,
        mlp_ratio=2.0,
        pool=pool,
    )
    return model.eval()


def test_patch_permutation_helper_moves_patches():
    images = torch.randn(1, 1, 16, 16)
    perm = torch.randperm(16)
    model = vit("none", "mean")
    tokens = model.patch_tokens(images)
    torch.testing.assert_close(model.patch_tokens(permute_patches(images, perm)), tokens[:, perm])


@pytest.mark.parametrize("pool", ["cls", "mean"])
@pytest.mark.parametrize("name", available_encoders("vision"))
def test_logits_are_permutation_invariant_only_without_positions(name, pool):
    model = vit(name, pool)
    torch.manual_seed(1)
    with torch.no_grad():  # a table that starts at zero, as its paper initialises it, is order-blind until trained
        for param in model.backbone.encoder.parameters():
            if not param.any():
                param.normal_(0.0, 0.5)
    images = torch.randn(3, 1, 16, 16)
    perm = torch.randperm(GRID * GRID)
    pos = grid_coordinates((GRID, GRID))
    with torch.no_grad():
        logits = model(images, pos)
        permuted = model(permute_patches(images, perm), pos)
    if name == "none":
        torch.testing.assert_close(permuted, logits, atol=1e-5, rtol=0)
    else:
        assert (permuted - logits).abs().max() > 1e-4, f"{name} ignored the patch order"
