"""``poslab show``: the numbers behind each encoder's picture, the figure file, and clear errors."""

from __future__ import annotations

import json
import math

import pytest
import torch

from poslab.cli import main
from poslab.encoders import available_encoders
from poslab.encoders.alibi import alibi_slopes
from poslab.modalities import available_modalities, get_modality

SINUSOID_GOLDEN = [  # Vaswani et al. at dim 4, positions 0..3: [sin p, cos p, sin p/100, cos p/100]
    [0.000, 1.000, 0.000, 1.000],
    [0.841, 0.540, 0.010, 1.000],
    [0.909, -0.416, 0.020, 1.000],
    [0.141, -0.990, 0.030, 1.000],
]


def show_json(capsys, *args) -> dict:
    assert main(["show", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("encoder", available_encoders("text"))
def test_every_1d_encoder_is_drawn_on_text(encoder, tmp_path, capsys):
    out = tmp_path / f"{encoder}.png"
    numbers = show_json(capsys, encoder, "--length", "12", "--dim", "16", "--heads", "2", "--out", str(out))
    assert out.stat().st_size > 1000 and numbers["encoder"] == encoder and numbers["length"] == 12
    drawn = {"table", "similarity", "score_vs_distance", "bias", "content_bias", "weights"} & set(numbers)
    assert drawn, "every encoder shows something (none: its all-zero similarity)"


def test_stick_breaking_is_drawn_as_its_weights_at_equal_logits(capsys, tmp_path):
    """σ(0) = 1/2 for every key: the key d tokens back takes (1/2)^d, what is left over goes to the query."""
    numbers = show_json(capsys, "stickbreaking", "--length", "5", "--heads", "2", "--out", str(tmp_path / "s.png"))
    last = numbers["weights"][0][4]
    assert last[:4] == pytest.approx([1 / 16, 1 / 8, 1 / 4, 1 / 2]) and last[4] == pytest.approx(1 / 16)


def test_sinusoidal_table_is_the_golden_one(capsys, tmp_path):
    numbers = show_json(capsys, "sinusoidal", "--dim", "4", "--length", "4", "--out", str(tmp_path / "s.png"))
    for row, golden in zip(numbers["table"], SINUSOID_GOLDEN, strict=True):
        assert row == pytest.approx(golden, abs=5e-4)
    assert numbers["hooks"] == ["encode_input"] and not numbers["learned"]


def test_rope_score_peaks_at_distance_zero_and_follows_the_cosine_sum(capsys, tmp_path):
    out = str(tmp_path / "r.png")
    numbers = show_json(capsys, "rope", "--dim", "32", "--heads", "2", "--length", "20", "--out", out)
    score = numbers["score_vs_distance"]["score"]
    head_dim = 16
    assert score[0] == pytest.approx(math.sqrt(head_dim))  # <1, 1> / sqrt(Dh)
    thetas = [10000 ** (-2 * k / head_dim) for k in range(head_dim // 2)]
    for d in (1, 7, 19):  # RoFormer: sum_k 2 cos(theta_k d) / sqrt(Dh)
        assert score[d] == pytest.approx(sum(2 * math.cos(t * d) for t in thetas) / math.sqrt(head_dim), abs=1e-4)
    assert max(score[1:]) < score[0]


def test_pope_score_is_the_magnitudes_times_the_cosine_sum_as_attention_scales_it(capsys, tmp_path):
    """Queries and keys of ones: softplus(1)² per channel, Σ_c cos(d·θ_c) over the d = 16 channels, / √16 (as
    attention scales PoPE's scores, though its queries and keys are 32 wide); its phase bias starts at 0."""
    out = str(tmp_path / "p.png")
    numbers = show_json(capsys, "pope", "--dim", "32", "--heads", "2", "--length", "12", "--out", out)
    score, head_dim = numbers["score_vs_distance"]["score"], 16
    magnitude = math.log1p(math.e) ** 2
    thetas = [10000 ** (-c / head_dim) for c in range(head_dim)]
    for d in (0, 1, 11):
        assert score[d] == pytest.approx(magnitude * sum(math.cos(t * d) for t in thetas) / 4.0, rel=1e-4)


def test_alibi_bias_per_head_is_the_paper_slope_times_distance_with_the_future_blank(capsys, tmp_path):
    out = str(tmp_path / "a.png")
    numbers = show_json(capsys, "alibi", "--heads", "4", "--dim", "16", "--length", "6", "--out", out)
    for head, slope in enumerate(alibi_slopes(4)):
        matrix = numbers["bias"][head]
        for i in range(6):
            assert matrix[i][: i + 1] == pytest.approx([-slope * (i - j) for j in range(i + 1)])
            assert matrix[i][i + 1 :] == [None] * (5 - i)  # the causal model never reads them


def test_options_reach_the_encoder_and_bad_input_is_one_clear_line(capsys, tmp_path):
    base = show_json(capsys, "rope", "--length", "8", "--out", str(tmp_path / "1.png"))
    slow = show_json(capsys, "rope", "base=10", "--length", "8", "--out", str(tmp_path / "2.png"))
    assert slow["score_vs_distance"]["score"][1] != pytest.approx(base["score_vs_distance"]["score"][1])
    for args, message in (
        (["rope", "layuot=half"], "did you mean 'encoder.layout'"),
        (["rope2d", "--modality", "text"], "encoders for text: alibi, "),
        (["rope", "--modality", "vidio"], "unknown modality 'vidio' (did you mean 'video'?)"),
        (["learned", "max_len=4", "--length", "8"], "max_len=4"),
        (["rope", "half"], "key=value"),
    ):
        assert main(["show", *args, "--out", str(tmp_path / "x.png")]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("poslab show: error:") and message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "x.png").exists()  # nothing written for bad input


@pytest.mark.parametrize(
    ("modality", "encoder"),
    [(m, e) for m in available_modalities() if get_modality(m).show for e in available_encoders(m)],  # show: optional
)
def test_every_encoder_of_every_modality_is_drawn(modality, encoder, tmp_path, capsys):
    """On the modality's own canonical positions: an L x L position-only score, and a PNG."""
    out = tmp_path / f"{modality}-{encoder}.png"
    shorter = ["--length", "2"] if modality == "video" else []  # 2 frames: the default 8 only take longer to draw
    args = ["--modality", modality, "--dim", "32", "--heads", "2", *shorter, "--out", str(out)]
    numbers = show_json(capsys, encoder, *args)
    assert out.stat().st_size > 1000 and numbers["modality"] == modality
    length = numbers["length"]
    if "similarity" in numbers:
        assert len(numbers["similarity"]) == length and len(numbers["similarity"][0]) == length
        scores = torch.tensor(numbers["similarity"])
        if encoder == "none" or not numbers["learned"]:  # learned biases (T5, Shaw) start at zero
            assert (scores.abs().max() == 0) == (encoder == "none")  # every fixed encoder shows something
    if numbers["layout"] is not None:
        assert math.prod(numbers["layout"]["shape"]) == length


@pytest.mark.parametrize(("encoder", "modality"), [("sincos2d", "vision"), ("calendar", "timeseries"),
                                                   ("rope3d", "video"), ("rope", "text")])  # fmt: skip
def test_an_encoder_is_drawn_on_the_simplest_modality_it_fits(encoder, modality, capsys, tmp_path):
    assert show_json(capsys, encoder, "--out", str(tmp_path / "x.png"))["modality"] == modality


def test_vision_is_the_vit_figure_and_rope2d_scores_follow_the_2d_offset(capsys, tmp_path):
    """A 4x4 grid of grids; for axial RoPE every patch's panel is the same map shifted by its own place."""
    numbers = show_json(
        capsys, "rope2d", "--length", "16", "--dim", "32", "--heads", "2", "--out", str(tmp_path / "v.png")
    )
    assert numbers["layout"] == {"shape": [4, 4], "axes": ["row", "col"]}
    scores = torch.tensor(numbers["similarity"]).view(4, 4, 4, 4)  # [row_i, col_i, row_j, col_j]
    for (ri, ci), (rj, cj) in (((0, 0), (1, 2)), ((2, 1), (3, 3)), ((1, 1), (2, 3))):
        torch.testing.assert_close(scores[ri, ci, rj, cj], scores[0, 0, rj - ri, cj - ci], atol=1e-5, rtol=0)
    head_dim, quarter = 16, 4  # RoPE-Axial: column and row pairs at 1/100^(4k/Dh): score = sum 2cos(...)/sqrt(Dh)
    thetas = [100 ** (-4 * k / head_dim) for k in range(quarter)]
    expected = sum(2 * math.cos(t * 2) + 2 * math.cos(t * 1) for t in thetas) / math.sqrt(head_dim)  # (dr, dc) = (1, 2)
    assert scores[0, 0, 1, 2].item() == pytest.approx(expected, abs=1e-4)


def test_time_series_shows_one_week_by_weekday_and_hour(capsys, tmp_path):
    numbers = show_json(capsys, "cyclic", "--out", str(tmp_path / "t.png"))
    assert numbers["layout"] == {"shape": [7, 24], "axes": ["weekday (Mon = 0)", "hour"]} and numbers["length"] == 168
    assert numbers["reference"] == 12  # Monday 12:00


def test_video_rope3d_scores_depend_only_on_the_space_time_offset(capsys, tmp_path):
    numbers = show_json(
        capsys, "rope3d", "--length", "4", "--dim", "32", "--heads", "2", "--out", str(tmp_path / "r.png")
    )
    assert numbers["layout"] == {"shape": [4, 4, 4], "axes": ["frame", "row", "col"]}
    scores = torch.tensor(numbers["similarity"]).view(4, 4, 4, 4, 4, 4)
    torch.testing.assert_close(
        scores[1, 0, 2, 3, 2, 3], scores[0, 0, 0, 2, 2, 1], atol=1e-5, rtol=0
    )  # offset (2, 2, 1)
    assert scores[0, 0, 0, 1, 0, 0] != pytest.approx(scores[0, 0, 0, 0, 1, 0].item())  # time and row differ
