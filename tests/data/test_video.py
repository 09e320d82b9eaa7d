"""Moving-digit clips: motion, bounces, labels, positions at other sizes, and the data module's batches."""

from __future__ import annotations

import pytest
import torch

from poslab.config.composition import compose
from poslab.errors import ConfigError
from poslab.modalities.video.clips import DIRECTIONS, make_clips, render, trajectories, velocities
from poslab.modalities.video.data import VideoDataModule, clip_positions


def test_directions_are_counter_clockwise_from_east_with_rows_growing_down():
    v = velocities(torch.arange(8), speed=2.0)
    expected = {"E": (0, 2), "N": (-2, 0), "W": (0, -2), "S": (2, 0), "NE": (-2, 2), "SW": (2, -2), "SE": (2, 2)}
    for name, (row, col) in expected.items():  # a diagonal moves `speed` along both axes
        torch.testing.assert_close(v[DIRECTIONS.index(name)], torch.tensor([row, col], dtype=torch.float64))


def test_a_digit_bounces_off_the_walls_elastically():
    """From column 5 moving east at 3 px / frame in a room of 10: 5, 8, then 11 reflects to 9 and heads west."""
    path = trajectories(torch.tensor([[4.0, 5.0]]), torch.tensor([[0.0, 3.0]]), frames=5, room=10)
    assert path[0, :, 1].tolist() == [5, 8, 9, 6, 3] and path[0, :, 0].tolist() == [4] * 5


def test_render_places_the_digit_at_each_corner():
    digit = torch.arange(1, 5, dtype=torch.uint8).view(1, 2, 2)
    clips = render(digit, torch.tensor([[[0, 0], [1, 2]]]), canvas=4)
    assert clips.shape == (1, 2, 1, 4, 4)
    assert clips[0, 0, 0, :2, :2].tolist() == [[1, 2], [3, 4]] and clips[0, 0].sum() == 10
    assert clips[0, 1, 0, 1:3, 2:4].tolist() == [[1, 2], [3, 4]] and clips[0, 1].sum() == 10


def _centre_of_mass(frame: torch.Tensor) -> torch.Tensor:
    weights = frame.float().squeeze(0)
    rows, cols = torch.meshgrid(torch.arange(weights.shape[0]), torch.arange(weights.shape[1]), indexing="ij")
    return torch.stack(((weights * rows).sum(), (weights * cols).sum())) / weights.sum()


def test_the_first_step_moves_the_way_the_label_says():
    """Starts leave room for the whole clip, so the first two frames always show the labelled direction."""
    digits = torch.zeros(200, 8, 8, dtype=torch.uint8)
    digits[:, 2:6, 2:6] = 255
    clips, direction = make_clips(digits, frames=3, canvas=24, speed=2.0, seed=0)
    assert set(direction.tolist()) == set(range(8))
    for clip, d in zip(clips, direction, strict=True):
        step = _centre_of_mass(clip[1]) - _centre_of_mass(clip[0])
        angle = torch.atan2(-step[0], step[1]) % (2 * torch.pi)  # rows grow downwards
        nearest = int(torch.round(angle / (torch.pi / 4))) % 8
        assert nearest == d


def test_longer_clips_and_larger_canvases_keep_each_clips_motion():
    digits = torch.full((20, 8, 8), 255, dtype=torch.uint8)
    short, direction = make_clips(digits, frames=4, canvas=16, speed=2.0, seed=3)
    long, same = make_clips(digits, frames=8, canvas=16, speed=2.0, seed=3, plan_frames=4)
    assert torch.equal(direction, same) and torch.equal(long[:, :4], short)
    assert torch.equal(make_clips(digits, frames=4, canvas=32, speed=2.0, seed=3)[1], direction)


def _corners(frames: torch.Tensor) -> torch.Tensor:
    """Top-left (row, col) of the lit square in each frame ``[N, T, 1, H, W]`` -> ``[N, T, 2]``."""
    lit = frames.squeeze(2) > 0
    rows = lit.any(dim=-1).float().argmax(dim=-1)
    cols = lit.any(dim=-2).float().argmax(dim=-1)
    return torch.stack((rows, cols), dim=-1)


def test_a_clip_never_bounces_so_its_path_does_not_give_the_direction_away():
    """Within the planned frames every digit moves in a straight line (no wall touched), and the places a
    direction's clips start at are the places the opposite direction's clips end at: reversed in time, a
    clip is an equally likely clip of the opposite direction, so only the frame order tells them apart."""
    digits = torch.full((4000, 4, 4), 255, dtype=torch.uint8)
    clips, direction = make_clips(digits, frames=6, canvas=20, speed=2.0, seed=0)
    corners = _corners(clips).double()
    straight = corners[:, :1] + velocities(direction, 2.0)[:, None] * torch.arange(6)[None, :, None]
    assert (corners - straight).abs().max() < 1  # rounding of the start and of each position only
    for d in range(8):
        starts, ends = corners[direction == d, 0], corners[direction == (d + 4) % 8, -1]
        assert torch.allclose(starts.min(0).values, ends.min(0).values, atol=1)
        assert torch.allclose(starts.max(0).values, ends.max(0).values, atol=1)
    longer, _ = make_clips(digits[:200], frames=20, canvas=20, speed=2.0, seed=0, plan_frames=6)
    assert (_corners(longer).diff(dim=1).abs() < 1).any()  # ... while longer clips bounce off the walls


def test_positions_list_frames_then_rows_then_cols_and_rescale_to_the_training_clip():
    pos = clip_positions(2, (2, 3))
    assert pos.coords3d.tolist()[:4] == [[0, 0, 0], [0, 0, 1], [0, 0, 2], [0, 1, 0]]
    assert pos.coords3d[6].tolist() == [1, 0, 0] and pos.steps.tolist() == [0] * 6 + [1] * 6
    assert torch.equal(pos.coords, pos.coords3d[:, 1:]) and pos.coords3d_grid == (2, 2, 3)
    longer = clip_positions(4, (2, 3), train=(2, 2, 3), mode="rescaled")
    frames = longer.coords3d[:, 0].unique().tolist()
    assert frames == pytest.approx([(t + 0.5) * 2 / 4 - 0.5 for t in range(4)])  # frame centres in training units
    assert longer.coords3d_grid is None and longer.steps.max() == 3  # steps stay raw frame indices
    raw = clip_positions(4, (2, 3), train=(2, 2, 3), mode="raw")
    assert raw.coords3d[:, 0].max() == 3 and raw.coords3d_grid == (4, 2, 3)


def test_the_data_module_gives_normalised_clips_with_positions_and_labels(tiny_video):
    cfg = compose(tiny_video)
    dm = VideoDataModule(cfg.data, seed=0)
    dm.prepare_data()
    dm.setup("fit")
    assert set(dm.splits) == {"train", "val"}  # only what fitting needs
    batch = dm.as_batch(next(iter(dm.train_dataloader())))
    assert batch["video"].shape == (32, 4, 1, 16, 16) and batch["video"].dtype == torch.float32
    assert batch["pos"].coords3d.shape == (4 * 4 * 4, 3) and batch["label"].max() < 8
    assert dm.model_facts() == {"num_classes": 8, "in_chans": 1}
    assert dm.context_options() == {"grid_size": (4, 4), "frames": 4, "max_len": 4}
    digits = VideoDataModule(compose([*tiny_video, "data.label=digit"]).data)
    digits.setup("test")
    assert digits.num_classes == 10 and set(digits.splits) == {"test"}


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("data.tubelet=3", "4 frames do not split into tubelets of data.tubelet=3"),
        ("eval.canvases=[18]", "a canvas of 18 px is not a multiple of data.patch_size=4"),
        ("data.digit_size=32", "needs a canvas of at least 40 px, got 16"),
        ("data.speed=0", "data.speed' must be > 0"),
    ],
)
def test_clips_that_do_not_cut_into_tokens_are_one_line_config_errors(tiny_video, override, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[")):
        compose([*tiny_video, override])


def test_moving_whole_patches_every_frame_shows_the_same_patches_wherever_the_digit_is():
    """speed = patch size (the default): each frame, cut into patches, is the same bag of patches, so a model
    without positions (none), or with the frame order only, cannot see the motion; where the frames differ is
    only the patches' places. And opposite directions visit the same places equally often."""
    digits = torch.randint(1, 255, (400, 8, 8), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    # planned for 3 frames, so starts vary along the motion too, and the digit bounces later
    clips, direction = make_clips(digits, frames=8, canvas=24, speed=4.0, seed=1, plan_frames=3)
    patches = clips.squeeze(2).unfold(2, 4, 4).unfold(3, 4, 4).flatten(2, 3).flatten(-2)  # [N, T, 36, 16]
    bags = patches.sort(dim=2).values  # order-free: the bag of patches of each frame
    assert torch.equal(bags, bags[:, :1].expand_as(bags))
    assert not torch.equal(patches, patches[:, :1].expand_as(patches))  # ... in other places
    corners = _corners(clips)
    for d in range(4):  # per clip, the places it visits and how often: the same for a direction and its opposite
        visits = [{tuple(sorted(map(tuple, c.tolist()))) for c in corners[direction == k]} for k in (d, d + 4)]
        assert visits[0] == visits[1]
