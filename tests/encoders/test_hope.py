"""``hope`` against the reference (hrlics/HoPE ``apply_hybrid_multimodal_rotary_pos_emb`` with VideoRoPE's
diagonal index): spatial pairs alternate row / column from the highest frequency, the lowest ``temporal_pairs``
turn by nothing; and the video data's dynamic temporal scaling."""

from __future__ import annotations

import math

import pytest
import torch

from poslab.encoders import build_encoder


def reference_angles(
    coords: torch.Tensor, head_dim: int, base: float, temporal: int, gamma: float, grid
) -> torch.Tensor:
    """The reference per pair: the diagonal index (γ·t, γ·t + row − (H−1)//2, γ·t + col − (W−1)//2); spatial pair
    j < P − t_pairs takes the row (j even) or the column (j odd), the rest cos 1 / sin 0 (angle 0)."""
    pairs = head_dim // 2
    theta = [base ** (-2 * j / head_dim) for j in range(pairs)]
    out = torch.zeros(len(coords), pairs, dtype=torch.float64)
    for n, (t, r, c) in enumerate(coords.tolist()):
        diagonal = gamma * t
        row, col = diagonal + r - (grid[0] - 1) // 2, diagonal + c - (grid[1] - 1) // 2
        for j in range(pairs - temporal):
            out[n, j] = (row if j % 2 == 0 else col) * theta[j]
    return torch.remainder(out, 2 * math.pi)


@pytest.mark.parametrize(("gamma", "temporal"), [(1.0, None), (1.5, 3)])
def test_angles_are_the_references_hybrid_allocation(gamma, temporal):
    enc = build_encoder("hope", dim=32, num_heads=2, temporal_spacing=gamma, temporal_pairs=temporal, grid_size=(4, 4))
    coords = torch.tensor([[t, r, c] for t in range(3) for r in range(4) for c in range(4)], dtype=torch.float32)
    expected = reference_angles(coords, 16, 10000.0, temporal or 2, gamma, (4, 4)).float()  # 2 of 8 pairs by default
    torch.testing.assert_close(enc.angles(coords), expected, rtol=1e-5, atol=1e-5)


def test_time_is_seen_only_through_the_diagonal():
    """With the temporal pairs at zero, a step of one frame and one cell back along both axes scores as no step
    at all (γ = 1), where VideoRoPE, whose temporal pairs turn, tells them apart."""
    q = torch.randn(1, 1, 1, 16).expand(1, 1, 2, 16)
    cells = torch.tensor([[0.0, 2.0, 2.0], [1.0, 1.0, 1.0]])  # (t, row, col): the diagonal index is equal
    same = torch.tensor([[0.0, 2.0, 2.0], [0.0, 2.0, 2.0]])

    def score(name, coords, **options):
        enc = build_encoder(name, dim=32, num_heads=2, grid_size=(4, 4), base=10.0, **options)
        rotated = enc.rotate(q, coords)
        return (rotated[0, 0, 0] @ rotated[0, 0, 1]).item()

    assert score("hope", cells) == pytest.approx(score("hope", same), rel=1e-5)
    assert score("videorope", cells, temporal_spacing=1.0) != pytest.approx(score("videorope", same), rel=1e-3)


def test_dynamic_temporal_scaling_scales_training_frame_indices_only():
    from poslab.config.composition import compose
    from poslab.modalities.video.data import VideoDataModule, temporally_scaled

    cfg = compose(["modality=video", "data.temporal_scales=[0.5,1.5]"])
    dm = VideoDataModule(cfg.data)
    pos = dm.positions()
    torch.manual_seed(0)
    seen = set()
    for _ in range(20):
        scaled = temporally_scaled(pos, [0.5, 1.5])
        ratio = scaled.coords3d[pos.coords3d[:, 0] > 0, 0] / pos.coords3d[pos.coords3d[:, 0] > 0, 0]
        assert torch.allclose(ratio, ratio[:1].expand_as(ratio))  # one γ for the whole batch
        assert torch.equal(scaled.coords3d[:, 1:], pos.coords3d[:, 1:]) and scaled.coords3d_grid is None
        seen.add(round(ratio[0].item(), 3))
    assert seen == {0.5, 1.5}
    clips = torch.zeros(2, 8, 1, 32, 32, dtype=torch.uint8)
    evaluated = dm.as_batch((clips, torch.zeros(2, dtype=torch.long)), training=False)["pos"]
    assert torch.equal(evaluated.coords3d, pos.coords3d)  # evaluation keeps the frame indices
    with pytest.raises(Exception, match="temporal_scales"):
        compose(["modality=video", "data.temporal_scales=[0]"])
