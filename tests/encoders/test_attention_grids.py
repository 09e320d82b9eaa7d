"""What attention computes with the rotary encoders of patch grids and videos (rope2d, rope2d_mixed, rope3d,
M-RoPE chunked and interleaved, VideoRoPE, HoPE, LieRE), for every value of their options.

Each layer's attention is recorded in a forward pass of the real :class:`Transformer` and rebuilt here from
the layer's own projections and the paper's scores written out: the angle every rotation pair turns by at
every token, from the paper's (or reference code's) assignment of pairs to axes and frequencies, then
Σ_j Re[(q_a + i q_b)(k_a − i k_b) e^{i(φ_j(n) − φ_j(m))}]/√d. LieRE's rotations are matrix exponentials of its
generators, summed here as a Taylor series in float64. A pair given the wrong axis or frequency, a layout
paired wrongly, an option ignored or a position remapped wrongly fails.
"""

from __future__ import annotations

import math

import pytest
import torch

from poslab.encoders import build_encoder
from poslab.positions import Positions
from tests.encoders.test_attention_computes import (
    DIM,
    HEADS,
    attention_from_scores,
    model_with,
    recorded_attention,
    rotation_pairs,
)

HEAD_DIM = DIM // HEADS  # 16: 8 rotation pairs
PAIRS = HEAD_DIM // 2
CELLS_2D = [(r, c) for r in range(3) for c in range(4)]  # a 3 x 4 patch grid
CELLS_3D = [(t, r, c) for t in range(3) for r in range(2) for c in range(2)]  # 3 frames of 2 x 2
#: integer cells, and cells rescaled to a coarser training grid (fractional coordinates)
SCALES = [1.0, 0.75]


def ladder(base: float, pairs: int = PAIRS) -> torch.Tensor:
    """θ_k = base^(−2k/Dh), k < Dh/2 (RoFormer eq. 15)."""
    return base ** (-2.0 * torch.arange(pairs, dtype=torch.float64) / (2 * pairs))


def check_rotary_attention(encoder, pos: Positions, angles: torch.Tensor, layout: str, causal: bool = False):
    """Every layer of a 2-layer model attends with the rotary scores of ``angles`` (``[L, P]``, or ``[H, L, P]``
    per head): the angle of pair j at token n, as the paper assigns it."""
    check_attention(encoder, pos, rotary_attention_scores(angles, layout), causal)


def rotary_attention_scores(angles: torch.Tensor, layout: str):
    """``scores(q, k)`` of queries and keys turned by ``angles`` (``[L, P]`` or ``[H, L, P]``)."""
    offset = angles[..., :, None, :] - angles[..., None, :, :]  # [(H,) Lq, Lk, P]
    factor = torch.polar(torch.ones_like(offset), offset)

    def scores(q, k):
        a, b = rotation_pairs(q.shape[-1], layout)
        qc, kc = torch.complex(q[..., a], q[..., b]), torch.complex(k[..., a], k[..., b])
        pattern = "bhnj,bhmj,nmj->bhnm" if factor.dim() == 3 else "bhnj,bhmj,hnmj->bhnm"
        return torch.einsum(pattern, qc, kc.conj(), factor).real / math.sqrt(q.shape[-1])

    return scores


def check_attention(encoder, pos: Positions, scores, causal: bool = False) -> None:
    model = model_with(encoder, depth=2, causal=causal)
    length = (pos.coords if pos.coords is not None else pos.coords3d).shape[-2]
    torch.manual_seed(1)
    x = torch.randn(2, length, DIM)
    for index, ((inputs, out), block) in enumerate(zip(recorded_attention(model, x, pos), model.blocks, strict=True)):
        expected = attention_from_scores(block.attn, inputs, scores, causal)
        torch.testing.assert_close(out.double(), expected, rtol=2e-4, atol=2e-5, msg=f"layer {index}")


def grid_2d(scale: float) -> tuple[Positions, torch.Tensor, torch.Tensor]:
    cells = torch.tensor(CELLS_2D, dtype=torch.float64) * scale
    return Positions(coords=cells.float()), cells[:, 0], cells[:, 1]


def grid_3d(scale: float) -> tuple[Positions, torch.Tensor, torch.Tensor, torch.Tensor]:
    cells = torch.tensor(CELLS_3D, dtype=torch.float64) * scale
    return Positions(coords3d=cells.float()), cells[:, 0], cells[:, 1], cells[:, 2]


# -- 2D ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("layout", ["interleaved", "half"])
@pytest.mark.parametrize("base", [100.0, 10.0])
def test_rope2d_attends_with_column_pairs_then_row_pairs(scale, layout, base):
    """Heo et al. 2024, eq. 10 (rope-vit ``compute_axial_cis``): f_k = 1/base^(4k/Dh), k < Dh/4; the first
    Dh/4 pairs turn by col·f_k, the next Dh/4 by row·f_k."""
    pos, rows, cols = grid_2d(scale)
    f = 1.0 / base ** (4.0 * torch.arange(HEAD_DIM // 4, dtype=torch.float64) / HEAD_DIM)
    angles = torch.cat((cols[:, None] * f, rows[:, None] * f), dim=-1)
    check_rotary_attention(build_encoder("rope2d", dim=DIM, num_heads=HEADS, base=base, layout=layout), pos, angles,
                           layout)  # fmt: skip


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("layout", ["interleaved", "half"])
@pytest.mark.parametrize("base", [10.0, 100.0])
def test_rope2d_mixed_attends_with_each_heads_learned_frequencies(scale, layout, base):
    """Heo et al. 2024, eq. 11: pair t of head h turns by f^x_{h,t}·col + f^y_{h,t}·row, the module's
    frequencies as constructed (rope-vit's init: magnitudes 1/base^(4k/Dh), per-head random direction, the
    second half of the pairs a quarter turn further)."""
    torch.manual_seed(3)
    encoder = build_encoder("rope2d_mixed", dim=DIM, num_heads=HEADS, base=base, layout=layout)
    assert encoder.freqs.shape[0] == 1  # without the model's depth: one set
    fx, fy = encoder.freqs.detach().double()[0]  # [H, P] each
    magnitude = 1.0 / base ** (4.0 * torch.arange(HEAD_DIM // 4, dtype=torch.float64) / HEAD_DIM)
    torch.testing.assert_close(torch.hypot(fx, fy), torch.cat((magnitude, magnitude)).expand(HEADS, -1))
    direction = torch.atan2(fy, fx)
    quarter_turn = direction[:, PAIRS // 2 :] - direction[:, : PAIRS // 2]
    torch.testing.assert_close(torch.remainder(quarter_turn, 2 * math.pi), torch.full_like(quarter_turn, math.pi / 2))
    pos, rows, cols = grid_2d(scale)
    angles = cols[None, :, None] * fx[:, None, :] + rows[None, :, None] * fy[:, None, :]  # [H, L, P]
    check_rotary_attention(encoder, pos, angles, layout)


# -- 3D rotary ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("layout", ["interleaved", "half"])
@pytest.mark.parametrize(("sections", "split"), [(None, (4, 2, 2)), ([2, 3, 3], (2, 3, 3)), ([3, 3, 2], (3, 3, 2))])
@pytest.mark.parametrize("base", [100.0, 10000.0])
def test_rope3d_gives_each_axis_its_own_ladder(scale, layout, sections, split, base):
    """RoPE-Axial over (t, row, col): axis a with n_a pairs turns its pair k by p_a·base^(−k/n_a) (RoFormer's
    eq. 15 per axis, d_a = 2·n_a), the pairs of t first, then row, then col; null sections split 8 pairs
    (4, 2, 2), the remainder to t."""
    pos, t, rows, cols = grid_3d(scale)
    angles = torch.cat(
        [
            p[:, None] * base ** (-torch.arange(n, dtype=torch.float64) / n)
            for p, n in zip((t, rows, cols), split, strict=True)
        ],
        dim=-1,
    )
    encoder = build_encoder("rope3d", dim=DIM, num_heads=HEADS, base=base, layout=layout, sections=sections)
    check_rotary_attention(encoder, pos, angles, layout)


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize(("sections", "split"), [(None, (2, 3, 3)), ([4, 2, 2], (4, 2, 2)), ([2, 2, 4], (2, 2, 4))])
@pytest.mark.parametrize("base", [100.0, 10000.0])
def test_mrope_cuts_one_ladder_into_time_row_and_column_blocks(scale, layout, sections, split, base):
    """Qwen2-VL §2.1 (HF ``apply_multimodal_rotary_pos_emb``): one ladder θ_k = base^(−2k/Dh); the first
    sections[0] pairs turn with the frame, the next sections[1] with the row, the last with the column;
    null sections are [1/4, 3/8, 3/8] of the pairs, h = w = ⌊3·8/8⌋ = 3."""
    pos, t, rows, cols = grid_3d(scale)
    follows = torch.cat([p[:, None].expand(-1, n) for p, n in zip((t, rows, cols), split, strict=True)], dim=-1)
    encoder = build_encoder("mrope", dim=DIM, num_heads=HEADS, base=base, layout=layout, sections=sections)
    check_rotary_attention(encoder, pos, follows * ladder(base), layout)


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize(("sections", "hw"), [(None, (2, 2)), ([3, 3, 2], (3, 2)), ([5, 2, 1], (2, 1))])
@pytest.mark.parametrize("base", [100.0, 10000.0])
def test_interleaved_mrope_is_qwen3vls_frequency_assignment(scale, layout, sections, hw, base):
    """Qwen3-VL (HF ``apply_interleaved_mrope``): every pair starts on the frame index; pairs 1, 4, 7, … below
    3h take the row and 2, 5, 8, … below 3w the column (null sections: h = w = ⌊5·8/16⌋ = 2)."""
    pos, t, rows, cols = grid_3d(scale)
    follows = t[:, None].expand(-1, PAIRS).clone()
    h, w = hw
    follows[:, 1 : 3 * h : 3] = rows[:, None]
    follows[:, 2 : 3 * w : 3] = cols[:, None]
    encoder = build_encoder(
        "mrope", dim=DIM, num_heads=HEADS, base=base, layout=layout, sections=sections, interleaved=True
    )
    check_rotary_attention(encoder, pos, follows * ladder(base), layout)


def diagonal_positions(t, rows, cols, spacing: float, grid: tuple[int, int] | None):
    """VideoRoPE's DL + ATS (reference ``get_t_scale_rope_index``): (δt, δt + row − (H−1)//2, δt + col − (W−1)//2)."""
    height, width = grid or (1, 1)
    return spacing * t, spacing * t + rows - (height - 1) // 2, spacing * t + cols - (width - 1) // 2


def videorope_angles(t, rows, cols, spacing, grid, temporal: int, base: float, zero_time: bool) -> torch.Tensor:
    """Spatial pairs first, row / col alternating from the row at the highest frequency; the last ``temporal``
    (lowest) frequencies follow the diagonal time; HoPE sets their frequencies to zero."""
    dt, dr, dc = diagonal_positions(t, rows, cols, spacing, grid)
    follows = torch.stack([dr if k % 2 == 0 else dc for k in range(PAIRS - temporal)] + [dt] * temporal, dim=-1)
    theta = ladder(base)
    if zero_time:
        theta[PAIRS - temporal :] = 0.0
    return follows * theta


VIDEO_CASES = [  # (options, temporal pairs, grid)
    ({}, 2, None),  # the reference's share of 8 pairs: 8 − 2·⌊3·8/8⌋ = 2
    ({"temporal_pairs": 1}, 1, None),
    ({"temporal_pairs": 4}, 4, None),
    ({"grid_size": [2, 3]}, 2, (2, 3)),  # centred on the frame: the same shift for every token
    ({"grid_size": [3, 4, 5]}, 2, (4, 5)),  # a (frames, rows, cols) grid gives its last two
]


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("spacing", [None, 1.0, 0.5])
@pytest.mark.parametrize(("options", "temporal", "grid"), VIDEO_CASES)
@pytest.mark.parametrize("base", [100.0, 10000.0])
def test_videorope_attends_on_the_diagonal_layout_with_time_on_the_lowest_frequencies(
    scale, layout, spacing, options, temporal, grid, base
):
    """Wei et al. 2025 (LTA, DL, ATS; the official code's assignment): null spacing is the reference's δ = 2."""
    pos, t, rows, cols = grid_3d(scale)
    chosen = {} if spacing is None else {"temporal_spacing": spacing}
    encoder = build_encoder("videorope", dim=DIM, num_heads=HEADS, base=base, layout=layout, **options, **chosen)
    angles = videorope_angles(t, rows, cols, spacing or 2.0, grid, temporal, base, zero_time=False)
    check_rotary_attention(encoder, pos, angles, layout)


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("spacing", [None, 2.0, 0.5])
@pytest.mark.parametrize(("options", "temporal", "grid"), VIDEO_CASES)
@pytest.mark.parametrize("base", [100.0, 10000.0])
def test_hope_attends_as_videorope_with_zero_temporal_frequencies(
    scale, layout, spacing, options, temporal, grid, base
):
    """Li et al. 2025 (reference ``apply_hybrid_multimodal_rotary_pos_emb``): VideoRoPE's layout with the time
    pairs at frequency zero (cos 1, sin 0), so time enters only through the diagonal; null spacing: γ = 1."""
    pos, t, rows, cols = grid_3d(scale)
    chosen = {} if spacing is None else {"temporal_spacing": spacing}
    encoder = build_encoder("hope", dim=DIM, num_heads=HEADS, base=base, layout=layout, **options, **chosen)
    angles = videorope_angles(t, rows, cols, spacing or 1.0, grid, temporal, base, zero_time=True)
    check_rotary_attention(encoder, pos, angles, layout)


# -- LieRE --------------------------------------------------------------------------------------------------


def expm(a: torch.Tensor) -> torch.Tensor:
    """exp(A) in float64 by scaling and squaring a 30-term Taylor series: written out, not the library's."""
    squarings = max(0, int(math.ceil(math.log2(max(a.abs().amax().item() * a.shape[-1], 1.0)))) + 1)
    a = a / 2**squarings
    term = torch.eye(a.shape[-1], dtype=a.dtype).expand_as(a)
    total = term
    for n in range(1, 30):
        term = term @ a / n
        total = total + term
    for _ in range(squarings):
        total = total @ total
    return total


def liere_rotations(encoder, positions: torch.Tensor, divisors: list[float], layer: int = 0) -> torch.Tensor:
    """R(p) = exp(Σ_a (p_a / s_a)·A_a) per head, token and block, A = U − Uᵀ of the strict upper triangle of the
    module's raw parameters as constructed, set ``layer`` (Ostmeier et al. 2024, §3; the reference's
    ``rope_vit.py``)."""
    upper = torch.triu(encoder.raw.detach().double()[layer], diagonal=1)
    generators = upper - upper.transpose(-1, -2)  # [heads, axes, blocks, b, b]
    scaled = positions / torch.tensor(divisors, dtype=torch.float64)  # [L, axes]
    summed = torch.einsum("la,haxij->hlxij", scaled, generators)
    return expm(summed)  # [heads, L, blocks, b, b]


def liere_scores(rotations: torch.Tensor, block: int):
    def scores(q, k):
        def turned(x):
            parts = x.unflatten(-1, (-1, block))  # [B, H, L, blocks, b]
            return torch.einsum("hlxij,bhlxj->bhlxi", rotations, parts).flatten(-2)

        return turned(q) @ turned(k).transpose(-1, -2) / math.sqrt(q.shape[-1])

    return scores


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("per_head", [True, False])
@pytest.mark.parametrize("block_size", [None, 4, 2])
@pytest.mark.parametrize(("grid_size", "position_scale", "divisors"), [
    ((3, 4), "linspace", [2.0, 3.0]),  # the reference's linspace(0, 1, n): index i to i/(n − 1)
    ((3, 4), "extent", [3.0, 4.0]),  # i/n
    ((6, 2), "linspace", [5.0, 1.0]),  # a training grid of another shape scales each axis by its own size
    ((1, 4), "linspace", [1.0, 3.0]),  # one row: no division by zero
])  # fmt: skip
def test_liere_attends_with_the_exponential_of_its_scaled_generators(
    scale, per_head, block_size, grid_size, position_scale, divisors
):
    """Scores (R(p_n)q)·(R(p_m)k)/√d with R as the paper defines it, per head or shared, dense or block-diagonal,
    positions scaled by the training grid as the option says."""
    torch.manual_seed(4)
    encoder = build_encoder("liere", dim=DIM, num_heads=HEADS, grid_size=grid_size, block_size=block_size,
                            per_head=per_head, position_scale=position_scale)  # fmt: skip
    pos, rows, cols = grid_2d(scale)
    rotations = liere_rotations(encoder, torch.stack((rows, cols), dim=-1), divisors)
    if not per_head:
        rotations = rotations.expand(HEADS, *rotations.shape[1:])
    check_attention(encoder, pos, liere_scores(rotations, block_size or HEAD_DIM))


@pytest.mark.parametrize("position_scale", ["linspace", "extent"])
def test_liere3d_scales_frames_rows_and_columns_by_the_training_clip(position_scale):
    torch.manual_seed(5)
    encoder = build_encoder("liere3d", dim=DIM, num_heads=HEADS, grid_size=(2, 2), frames=3, block_size=4,
                            position_scale=position_scale)  # fmt: skip
    pos, t, rows, cols = grid_3d(1.0)
    divisors = [2.0, 1.0, 1.0] if position_scale == "linspace" else [3.0, 2.0, 2.0]
    rotations = liere_rotations(encoder, torch.stack((t, rows, cols), dim=-1), divisors)
    check_attention(encoder, pos, liere_scores(rotations, 4))


def test_the_written_out_exponential_is_a_rotation_and_matches_rope_for_a_2x2_generator():
    """The Taylor-series exp of [[0, −θ], [θ, 0]] is the rotation by θ (so the LieRE tests' reference is sound)."""
    theta = 2.7
    generator = torch.tensor([[0.0, -theta], [theta, 0.0]], dtype=torch.float64)
    expected = torch.tensor([[math.cos(theta), -math.sin(theta)], [math.sin(theta), math.cos(theta)]])
    torch.testing.assert_close(expm(generator), expected.double())


@pytest.mark.parametrize("name", ["liere", "rope2d_mixed"])
def test_by_default_each_layer_turns_by_its_own_set_and_per_layer_false_shares_one(name):
    """The references train one set per layer (LieRE's ``rotary_embedding_per_layer: True``; RoPE-Mixed's
    frequencies per layer): with the model's depth in the context, layer i attends with set i; with
    ``per_layer=false``, every layer with the one set."""
    from poslab.encoders import build_encoder_in_context

    context = {"grid_size": (3, 4), "depth": 2, "bidirectional": True}
    pos, rows, cols = grid_2d(1.0)
    for per_layer in (True, False):
        torch.manual_seed(6)
        encoder = build_encoder_in_context(name, dim=DIM, num_heads=HEADS, options={"per_layer": per_layer},
                                           context=context)  # fmt: skip
        sets = encoder.raw if name == "liere" else encoder.freqs
        assert sets.shape[0] == (2 if per_layer else 1) and (not per_layer or not torch.equal(sets[0], sets[1]))
        model = model_with(encoder, depth=2, causal=False)
        torch.manual_seed(1)
        x = torch.randn(2, len(rows), DIM)
        for index, ((inputs, out), block) in enumerate(zip(recorded_attention(model, x, pos), model.blocks,
                                                           strict=True)):  # fmt: skip
            layer = index if per_layer else 0
            if name == "liere":
                rotations = liere_rotations(encoder, torch.stack((rows, cols), dim=-1), [2.0, 3.0], layer)
                scores = liere_scores(rotations, HEAD_DIM)
            else:
                fx, fy = encoder.freqs.detach().double()[layer]
                angles = cols[None, :, None] * fx[:, None, :] + rows[None, :, None] * fy[:, None, :]
                scores = rotary_attention_scores(angles, "interleaved")
            expected = attention_from_scores(block.attn, inputs, scores, False)
            torch.testing.assert_close(out.double(), expected, rtol=2e-4, atol=2e-5, msg=f"layer {index}")
