"""What attention computes inside the backbone, for the encoders that act beyond the three hooks: scaled
rotations (xPos), content-dependent positions (CoPE) and per-layer members (RNoPE, ``a,b`` patterns).

Each layer's attention is recorded in a forward pass of the real :class:`Transformer` (its input and
output) and compared with the output rebuilt here from the layer's own projections and the paper's
scores written out — so a hook that is right on its own but applied wrongly (a decay dropped from the
keys, a layout paired wrongly, gates computed from unscaled logits, a layer given the wrong member)
fails. The last test tries every value of every option of every registered encoder and checks that
each one changes what the model computes.
"""

from __future__ import annotations

import math
import typing

import pytest
import torch
import torch.nn.functional as F

from poslab.config.ranges import range_of
from poslab.encoders import (
    available_encoders,
    build_encoder,
    build_encoder_in_context,
    encoder_class,
    encoder_defaults,
)
from poslab.encoders.registry import encoder_options
from poslab.nn.backbone import Transformer
from poslab.positions import Positions
from tests.encoders.test_registry import SAMPLE_CONTEXT, sample_positions

DIM, HEADS, LENGTH = 32, 2, 12


def recorded_attention(model: Transformer, x: torch.Tensor, pos) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(input, output) of every layer's attention in one forward pass."""
    seen: list[tuple[torch.Tensor, torch.Tensor]] = []
    hooks = [
        block.attn.register_forward_hook(lambda module, args, out: seen.append((args[0].detach(), out.detach())))
        for block in model.blocks
    ]
    try:
        with torch.no_grad():
            model(x, pos)
    finally:
        for hook in hooks:
            hook.remove()
    return seen


def attention_from_scores(attn, x: torch.Tensor, scores, causal: bool) -> torch.Tensor:
    """The layer's output rebuilt from its projections: softmax(``scores(q, k)`` + causal mask) · v, in
    float64; ``scores`` returns the paper's logits ``[B, H, Lq, Lk]`` (its 1/√d included)."""
    batch, length, dim = x.shape
    x = x.detach().double()
    qkv = x @ attn.qkv.weight.detach().double().T + attn.qkv.bias.detach().double()
    q, k, v = qkv.view(batch, length, 3, attn.num_heads, attn.head_dim).permute(2, 0, 3, 1, 4)
    logits = scores(q, k)
    if causal:
        logits = logits.masked_fill(torch.ones(length, length, dtype=torch.bool).triu(1), float("-inf"))
    out = (logits.softmax(-1) @ v).transpose(1, 2).reshape(batch, length, dim)
    return out @ attn.proj.weight.detach().double().T + attn.proj.bias.detach().double()


def model_with(encoder, depth: int = 1, causal: bool = True) -> Transformer:
    torch.manual_seed(0)
    return Transformer(encoder, dim=DIM, depth=depth, num_heads=HEADS, mlp_ratio=2.0, causal=causal)


def check_layers(model: Transformer, scores_of_layer, causal: bool, length: int = LENGTH) -> None:
    torch.manual_seed(1)
    x = torch.randn(2, length, DIM)
    for index, ((inputs, out), block) in enumerate(
        zip(recorded_attention(model, x, Positions(steps=torch.arange(length))), model.blocks, strict=True)
    ):
        expected = attention_from_scores(block.attn, inputs, scores_of_layer(index), causal)
        torch.testing.assert_close(out.double(), expected, rtol=2e-4, atol=2e-5, msg=f"layer {index}")


# -- rotations written out ------------------------------------------------------------------------------


def rotation_pairs(d: int, layout: str) -> tuple[list[int], list[int]]:
    """The channels each rotation pair takes: (j, j + d/2) in the half layout, (2j, 2j + 1) interleaved."""
    if layout == "half":
        return list(range(d // 2)), list(range(d // 2, d))
    return list(range(0, d, 2)), list(range(1, d, 2))


def rotary_scores(q, k, base: float, layout: str, decay=None):
    """Σ_j Re[(q_a + i q_b)(k_a − i k_b) e^{i(n−m)θ_j}] · decay_j(n − m) / √d, θ_j = base^(−2j/d)
    (RoFormer eq. 15-16; xPos eq. 5-6 multiplies each pair by ζ_j^((n−m)/B))."""
    d, length = q.shape[-1], q.shape[-2]
    a, b = rotation_pairs(d, layout)
    qc, kc = torch.complex(q[..., a], q[..., b]), torch.complex(k[..., a], k[..., b])  # [B, H, L, d/2]
    theta = base ** (-2.0 * torch.arange(d // 2, dtype=torch.float64) / d)
    offset = (torch.arange(length)[:, None] - torch.arange(length)[None, :]).double()  # n − m
    factor = torch.polar(torch.ones(length, length, d // 2, dtype=torch.float64), offset[..., None] * theta)
    if decay is not None:
        factor = factor * decay(offset)
    return torch.einsum("bhnj,bhmj,nmj->bhnm", qc, kc.conj(), factor).real / math.sqrt(d)


def plain_scores(q, k):
    return q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])


# -- xPos -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["interleaved", "half"])
@pytest.mark.parametrize("gamma", [0.1, 0.4, 2.0])
@pytest.mark.parametrize("scale_base", [4.0, 512.0])
def test_xpos_attention_is_rope_times_the_per_pair_decay(layout, gamma, scale_base):
    """Sun et al. 2022, eq. 5-6: ζ_j = (2j/d + γ) / (1 + γ) per rotation pair j, the score of q at n and
    k at m scaled by ζ_j^((n−m)/B); a strong decay (B = 4) and the default (B = 512), each γ, each layout."""
    encoder = build_encoder(
        "xpos", dim=DIM, num_heads=HEADS, base=100.0, layout=layout, gamma=gamma, scale_base=scale_base
    )
    d = DIM // HEADS
    zeta = (2 * torch.arange(d // 2, dtype=torch.float64) / d + gamma) / (1 + gamma)

    def decay(offset):
        return zeta ** (offset[..., None] / scale_base)

    check_layers(model_with(encoder), lambda _: lambda q, k: rotary_scores(q, k, 100.0, layout, decay), causal=True)


def test_xpos_attention_differs_from_rope_by_its_decay():
    """The decay is visible in what attention computes: the same weights with the decay left out are RoPE."""
    xpos = model_with(build_encoder("xpos", dim=DIM, num_heads=HEADS, base=100.0, scale_base=4.0))
    torch.manual_seed(1)
    x = torch.randn(2, LENGTH, DIM)
    ((inputs, out),) = recorded_attention(xpos, x, torch.arange(LENGTH))
    rope = attention_from_scores(
        xpos.blocks[0].attn, inputs, lambda q, k: rotary_scores(q, k, 100.0, "interleaved"), True
    )
    assert (out.double() - rope).abs().max() > 1e-2


# -- CoPE -------------------------------------------------------------------------------------------------


def cope_scores(q, k, table: torch.Tensor, causal: bool):
    """Golovneva et al. 2024, eq. 3-5, one score at a time: z_ij = q_i·k_j/√d; gates g_ij = σ(z_ij) over
    the visible keys; p_ij = Σ_t g_it for t from j to i (either side when bidirectional), at most P − 1;
    e(p) = (p − ⌊p⌋)·e[⌈p⌉] + (⌈p⌉ − p)·e[⌊p⌋] (e[⌊p⌋] at an integer p); score z_ij + q_i·e(p_ij)."""
    z = plain_scores(q, k)
    batch, heads, length, _ = z.shape
    out = torch.full_like(z, float("-inf"))
    top = table.shape[1] - 1
    for b in range(batch):
        for h in range(heads):
            for i in range(length):
                visible = range(i + 1) if causal else range(length)
                gates = {t: torch.sigmoid(z[b, h, i, t]) for t in visible}
                for j in visible:
                    p = min(sum(gates[t] for t in range(min(i, j), max(i, j) + 1)), top)
                    low, high = math.floor(p), math.ceil(p)
                    weight = p - low
                    embedding = table[:, high] * weight + table[:, low] * (1 - weight)
                    out[b, h, i, j] = z[b, h, i, j] + q[b, h, i] @ embedding
    return out


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("npos_max", [3, 64])
def test_cope_attention_adds_the_interpolated_contextual_position(causal, npos_max):
    """Every score as eq. 3-5 define it, causal and bidirectional, with counts clamped (P = 3) or not (64);
    the table is drawn at random (it starts at zero, which would hide the position term)."""
    encoder = build_encoder("cope", dim=DIM, num_heads=HEADS, npos_max=npos_max)
    torch.manual_seed(2)
    with torch.no_grad():
        encoder.pos_emb.normal_()
    table = encoder.pos_emb.detach().double()
    model = model_with(encoder, causal=causal)
    check_layers(model, lambda _: lambda q, k: cope_scores(q, k, table, causal), causal=causal, length=8)


# -- per-layer members ------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("nope_every", [2, 4])
def test_rnope_attends_without_position_in_every_nope_every_th_layer(layout, nope_every):
    """Yang et al. 2025 / Llama 4 iRoPE: layers 3, 7, … (``nope_every`` = 4) attend with q·k alone, the
    others with RoPE's scores; 4 layers, each checked against its own formula."""
    encoder = build_encoder("rnope", dim=DIM, num_heads=HEADS, base=100.0, layout=layout, nope_every=nope_every)

    def scores_of_layer(index):
        if (index + 1) % nope_every == 0:
            return plain_scores
        return lambda q, k: rotary_scores(q, k, 100.0, layout)

    check_layers(model_with(encoder, depth=4), scores_of_layer, causal=True)


def outside_window(length: int, window: int, causal: bool) -> torch.Tensor:
    """Keys a query may not see in a W-token sliding window: i − j ≥ W, or |i − j| ≥ W bidirectional."""
    offset = torch.arange(length)[:, None] - torch.arange(length)[None, :]
    return offset >= window if causal else offset.abs() >= window


@pytest.mark.parametrize("window", [3, 5])
def test_rnope_swa_windows_its_rope_layers_and_keeps_the_nope_layers_global(window):
    """Cohere's RNoPE-SWA: the RoPE layers attend within a W-token sliding window, the NoPE layer (3) to every
    earlier token."""
    encoder = build_encoder("rnope", dim=DIM, num_heads=HEADS, base=100.0, layout="half", window=window)
    hidden = outside_window(LENGTH, window, causal=True)

    def scores_of_layer(index):
        if index == 3:
            return plain_scores
        return lambda q, k: rotary_scores(q, k, 100.0, "half").masked_fill(hidden, float("-inf"))

    check_layers(model_with(encoder, depth=4), scores_of_layer, causal=True)


@pytest.mark.parametrize("log_base", [None, 3.0])
def test_swan_scales_the_nope_layers_logits_by_the_log_of_the_position_and_leaves_the_rope_layers(log_base):
    """SWAN-GPT (Puvvada et al. 2025, §2.2, App. D): at inference the NoPE layers' logits for the query at n
    are multiplied by ln(a + n) / ln a; a = the training context (12 here) unless given."""
    encoder = build_encoder(
        "rnope", dim=DIM, num_heads=HEADS, base=100.0, window=4, max_len=LENGTH, log_scale_base=log_base
    ).extended("swan", 8.0)
    a = log_base or LENGTH
    scale = torch.log(a + torch.arange(LENGTH, dtype=torch.float64)) / math.log(a)
    hidden = outside_window(LENGTH, 4, causal=True)

    def scores_of_layer(index):
        if index == 3:
            return lambda q, k: plain_scores(q, k) * scale[:, None]
        return lambda q, k: rotary_scores(q, k, 100.0, "half").masked_fill(hidden, float("-inf"))

    check_layers(model_with(encoder, depth=4), scores_of_layer, causal=True)
    assert scale[0] == 1 and scale[-1] > 1


@pytest.mark.parametrize("causal", [True, False])
def test_a_windowed_rope_attends_within_its_window_either_way(causal):
    encoder = build_encoder("rope", dim=DIM, num_heads=HEADS, base=100.0, window=4)
    hidden = outside_window(LENGTH, 4, causal)
    scores = lambda q, k: rotary_scores(q, k, 100.0, "half").masked_fill(hidden, float("-inf"))  # noqa: E731
    check_layers(model_with(encoder, depth=2, causal=causal), lambda _: scores, causal=causal)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("block", [3, 5])
def test_xpos_blockwise_attention_sees_its_own_block_and_the_one_before(causal, block):
    """Sun et al. 2022, §3.3: blocks of the training length (here 3 or 5 of the 12 tokens); key j is visible
    to query i when ⌊j/B⌋ is ⌊i/B⌋ or ⌊i/B⌋ − 1 (bidirectional: or ⌊i/B⌋ + 1), on top of the causal mask."""
    encoder = build_encoder("xpos", dim=DIM, num_heads=HEADS, base=100.0, scale_base=8.0, blockwise=True, max_len=block)
    d = DIM // HEADS
    zeta = (2 * torch.arange(d // 2, dtype=torch.float64) / d + 0.4) / 1.4
    rows = [i // block for i in range(LENGTH)]
    hidden = torch.tensor(
        [[not (0 <= rows[i] - rows[j] <= 1 if causal else abs(rows[i] - rows[j]) <= 1) for j in range(LENGTH)]
         for i in range(LENGTH)]
    )  # fmt: skip

    def scores(q, k):
        decayed = rotary_scores(q, k, 100.0, "interleaved", lambda offset: zeta ** (offset[..., None] / 8.0))
        return decayed.masked_fill(hidden, float("-inf"))

    check_layers(model_with(encoder, depth=2, causal=causal), lambda _: scores, causal=causal)


def test_xpos_blockwise_is_plain_causal_attention_within_the_training_length():
    plain = model_with(build_encoder("xpos", dim=DIM, num_heads=HEADS, base=100.0))
    blocks = model_with(build_encoder("xpos", dim=DIM, num_heads=HEADS, base=100.0, blockwise=True, max_len=LENGTH))
    torch.manual_seed(1)
    x = torch.randn(2, LENGTH, DIM)
    with torch.no_grad():
        torch.testing.assert_close(blocks(x, torch.arange(LENGTH)), plain(x, torch.arange(LENGTH)))
    with pytest.raises(Exception, match="blockwise attention needs max_len"):
        build_encoder("xpos", dim=DIM, num_heads=HEADS, blockwise=True)


def test_a_per_layer_pattern_gives_each_layer_its_member():
    """``encoder=xpos,none,rope``: layer i attends as member i mod 3 (xPos's decay, nothing, plain RoPE),
    each with the options given to it."""
    from poslab.encoders import build_encoder_in_context as build

    options = {"xpos": {"base": 100.0, "scale_base": 4.0}, "rope": {"base": 100.0, "layout": "interleaved"}}
    encoder = build("xpos,none,rope", dim=DIM, num_heads=HEADS, options=options, context={"max_len": 64})
    d = DIM // HEADS
    zeta = (2 * torch.arange(d // 2, dtype=torch.float64) / d + 0.4) / 1.4
    members = [
        lambda q, k: rotary_scores(q, k, 100.0, "interleaved", lambda o: zeta ** (o[..., None] / 4.0)),
        plain_scores,
        lambda q, k: rotary_scores(q, k, 100.0, "interleaved"),
    ]
    check_layers(model_with(encoder, depth=6), lambda index: members[index % 3], causal=True)


# -- every option value changes what the model computes -------------------------------------------------

#: Options whose other values cannot be read off their type (a list, a grid, a value the data fills), and
#: the values each is tried with.
TRIED: dict[tuple[str, str], list[typing.Any]] = {
    ("calendar", "fields"): [["weekday", "hour"], ["hour", "day"]],
    ("calendar", "step_seconds"): [3600, 60],  # below an hour adds the minute table
    ("cyclic", "periods"): [["day", "week"], ["day"]],
    ("cope", "npos_max"): [64, 3],  # 3: the counts of 16 tokens clamp
    ("learned2d", "grid_size"): [(4, 4), (8, 8)],
    ("learned3d", "grid_size"): [(4, 4), (8, 8)],
    ("learned3d", "frames"): [4, 8],
    ("liere", "block_size"): [None, 4, 2],
    ("rope2d_dinov3", "min_period"): [0.5, 2.0],
    ("rope2d_dinov3", "max_period"): [20.0, 50.0],
    ("rope2d_dinov3", "jitter"): [None, 1.5],  # training-time draws: the model here trains
    ("rope2d_dinov3", "rescale"): [None, 2.0],
    ("rope2d_dinov3", "grid_size"): [(4, 4), (8, 8), (2, 8)],  # what [-1, 1] spans
    ("liere", "grid_size"): [(4, 4), (8, 2), (1, 1)],  # the position scale is per axis of the grid
    ("liere", "depth"): [None, 4],  # one set, or one per layer of the 4
    ("liere3d", "depth"): [None, 4],
    ("comrope", "depth"): [None, 4],
    ("comrope", "grid_size"): [(4, 4), (8, 2)],  # the position scale per axis
    ("rope2d_mixed", "depth"): [None, 4],
    ("liere3d", "block_size"): [None, 4],
    ("liere3d", "grid_size"): [(4, 4), (2, 8)],
    ("liere3d", "frames"): [4, 8],
    ("fox", "depth"): [None, 4],  # one gate shared by the layers, or one each
    ("gemma3", "global_every"): [6, 2],  # 6: no global layer among the 4; 2: layers 1 and 3
    ("gemma3", "window"): [None, 2],  # None: a quarter of the context (16, every sample token)
    ("gemma3", "max_len"): [64, 16],  # the window when it is None: 16 or 4 tokens
    ("path", "depth"): [None, 4],  # one set of transforms shared by the layers, or one each
    ("fire", "eps"): [1e-6, 0.5],  # the normaliser's offset: visible once it is not tiny
    ("kerple", "eps"): [0.01, 1.0],  # the floor of its coefficients: 1.0 lifts some
    ("mrope", "sections"): [None, [4, 2, 2], [2, 2, 4]],  # None: Qwen2-VL's ratio, [2, 3, 3] of 8 pairs
    ("rope3d", "sections"): [None, [2, 3, 3], [3, 3, 2]],  # None: [4, 2, 2]
    ("rope", "scaling"): [None, {"type": "linear", "factor": 2.0}],
    ("rope_clipped", "clip"): [None, 2],  # None: the 5 of 8 frequencies slower than the context of 64
    ("rope_clipped", "max_len"): [64, 16],  # with clip None: 5 or 7 clipped
    ("rope_clipped", "scaling"): [None, {"type": "linear", "factor": 2.0}],
    ("rope2d_golden", "grid_size"): [(4, 4), (8, 2)],  # the span the coordinates are normalised over
    ("rope2d_golden", "zero_freqs"): [0.0, 0.25],  # 2 of the 8 pairs still
    ("rope", "window"): [None, 4, 8],
    ("rnope", "window"): [None, 4],
    ("ssmax", "init_scale"): [None, 0.5],  # None: 1 / log of the context
    ("ssmax", "max_len"): [64, 16],  # sets s's start when init_scale is None
    ("temperature", "floor_scale"): [None, 4],  # None: 1/32 of the context (2)
    ("temperature", "max_len"): [64, 4],  # the floor scale when floor_scale is None: 2 or 1
    ("timefeatures", "step_seconds"): [3600, 60],
    ("t5", "max_distance"): [128, 16],  # 16 tokens' distances fall in other log buckets only below 128
    ("videorope", "temporal_pairs"): [None, 4],  # None: a quarter of the pairs, 2
    ("xpos", "max_len"): [64, 4],  # the block size, with blockwise on (ALONG)
    ("hope", "temporal_pairs"): [None, 4],  # the zeroed pairs
}

#: Options set along with one tried, so that the tried one acts on the 16 sample tokens.
ALONG: dict[tuple[str, str], dict[str, typing.Any]] = {
    ("temperature", "attn_scale"): {"floor_scale": 4},  # 1 before the floor scale
    ("gemma3", "global_base"): {"global_every": 2},  # a global layer among the 4
    ("xpos", "blockwise"): {"max_len": 4},  # blocks of 4 among the 16 sample tokens (64: one block)
    ("xpos", "max_len"): {"blockwise": True},
    ("liere", "per_layer"): {"depth": 4},  # a set per layer of the 4, or one
    ("rope2d_dinov3", "min_period"): {"base": None, "max_period": 50.0},  # periods or a base
    ("rope2d_dinov3", "max_period"): {"base": None, "min_period": 0.5},
    ("rope2d_dinov3", "normalize"): {"grid_size": (2, 8)},  # a square grid normalises alike every way
    ("liere3d", "per_layer"): {"depth": 4},
    ("comrope", "per_layer"): {"depth": 4},
    ("rope2d_mixed", "per_layer"): {"depth": 4},
}

#: Options that do not change what a model of the sample context computes, and why (the data's own value
#: is taken, or it sizes a table whose rows in use are the same).
INERT = {
    ("learned", "max_len"): "the table's length: positions inside it read the same rows",
    ("rope", "max_len"): "the context the extensions extend from: training attention does not read it",
    ("rnope", "max_len"): "the context the extensions extend from: training attention does not read it",
    ("rnope", "log_scale_base"): "a in the swan extension at evaluation: training attention does not read it",
    ("drope", "recalibrate"): "when training drops the rotation: a model at step 0 rotates (test_drope.py tries it)",
    ("drope", "recalibrate_lr"): "the optimiser's rate after the drop, not attention (test_drope.py tries it)",
    ("drope", "recalibrate_warmup"): "the optimiser's rate after the drop, not attention (test_drope.py tries it)",
    ("longrope2", "max_len"): "where its searched factors take over: a model at step 0 has none (test_longrope2.py)",
    ("longrope2", "factor"): "the length its factors are searched for: a model at step 0 has none (test_longrope2.py)",
    ("longrope2", "extend"): "when training extends: a model at step 0 rotates as RoPE (test_longrope2.py tries it)",
    ("longrope2", "short_share"): "which rows the extension trains on, not attention (test_longrope2.py tries it)",
    ("longrope2", "extend_lr"): "the optimiser's rate in the extension, not attention (test_longrope2.py tries it)",
    ("longrope2", "extend_warmup"): "the optimiser's rate in the extension, not attention (test_longrope2.py tries it)",
    ("videorope", "grid_size"): "it centres every frame by one shift, which no score among video tokens sees",
    ("hope", "grid_size"): "it centres every frame by one shift, which no score among video tokens sees",
    ("rope2d_dinov3", "shift"): "one translation of every coordinate, which no score among rotated tokens sees "
    "(an unrotated class token's do: test_rope2d_dinov3.py draws it)",
}


def derived_values(annotation, default) -> list[typing.Any] | None:
    """The values to try for an option of this type: every choice of a Literal, both of a bool, the default
    and a second value in the declared range for a number; None when the type does not say."""
    hint = annotation
    while typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) is typing.Literal:
        return list(typing.get_args(hint))
    if hint is bool or args == [bool]:
        return [True, False]  # a None default follows the attention's direction: one of these
    if isinstance(default, (int, float)) and not isinstance(default, bool):
        declared = range_of(annotation)
        for other in (default * 2, default / 2, default + 1):
            other = type(default)(other)
            if other != default and (declared is None or declared.holds(other)):
                return [default, other]
    return None


def option_cases() -> list[tuple[str, str, list[typing.Any]]]:
    cases = []
    for name in available_encoders():
        hints = typing.get_type_hints(encoder_class(name).__init__, include_extras=True)
        for option, parameter in encoder_options(name).items():
            if (name, option) in INERT:
                continue
            values = TRIED.get((name, option)) or derived_values(hints[option], parameter.default)
            cases.append((name, option, values))
    return cases


def deterministic_(module: torch.nn.Module) -> None:
    """Every parameter set from its own index (not from a random stream, which a table's size would shift),
    and none left at zero: a zero-initialised table (CoPE's) would hide every option it shapes."""
    with torch.no_grad():
        for parameter in module.parameters():
            if parameter.dim() == 0:
                parameter.fill_(0.3)
                continue
            grids = torch.meshgrid(*(torch.arange(n, dtype=torch.float32) for n in parameter.shape), indexing="ij")
            parameter.copy_(0.5 * torch.sin(sum((g + 1) * (0.37 * (axis + 1)) for axis, g in enumerate(grids)) + 0.1))


def computed(name: str, option: str, value) -> tuple[dict[str, torch.Tensor], list[torch.Tensor]]:
    """The encoder's parameters as constructed, and what a 4-layer model with it computes, causal and
    bidirectional (told to the encoder as a task tells it), once its parameters are set from their indices."""
    options = {**encoder_defaults(name), **ALONG.get((name, option), {}), option: value}
    pos = sample_positions(16, facts=True)
    torch.manual_seed(1)
    x = torch.randn(2, 16, DIM)
    constructed, outputs = {}, []
    for causal in (True, False):
        context = {**SAMPLE_CONTEXT, "bidirectional": not causal}
        torch.manual_seed(0)
        encoder = build_encoder_in_context(name, dim=DIM, num_heads=HEADS, options=options, context=context)
        constructed = constructed or {k: v.detach().clone() for k, v in encoder.state_dict().items()}
        deterministic_(encoder)
        with torch.no_grad():
            outputs.append(model_with(encoder, depth=4, causal=causal)(x, pos))
    return constructed, outputs


def same(first, second) -> bool:
    (params_a, outs_a), (params_b, outs_b) = first, second
    params_equal = params_a.keys() == params_b.keys() and all(
        params_a[k].shape == params_b[k].shape and torch.equal(params_a[k], params_b[k]) for k in params_a
    )
    # beyond float rounding: an option that only reorders the arithmetic (a shift every score cancels) is inert
    return params_equal and all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(outs_a, outs_b, strict=True))


def test_every_option_of_every_encoder_has_values_to_try():
    """A new encoder's option is tried here with no edit when its type names its values (a Literal, a bool,
    a number with a range); one that does not is listed in TRIED (or INERT, with the reason)."""
    untried = [(name, option) for name, option, values in option_cases() if not values]
    assert not untried, f"add the values to try to TRIED: {untried}"
    stale = [key for key in (*TRIED, *ALONG, *INERT) if key[1] not in encoder_options(key[0])]
    assert not stale, stale


@pytest.mark.parametrize(("name", "option", "values"), option_cases(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_value_of_every_option_changes_what_the_model_computes(name, option, values):
    """No value is ignored: each gives other parameters as constructed or another output (causal or
    bidirectional) than every other value tried — a layout, a variant, a flag, a scale, a base."""
    results = [computed(name, option, value) for value in values]
    for i in range(len(values)):
        for j in range(i + 1, len(values)):
            assert not same(results[i], results[j]), (
                f"{name}: {option}={values[i]!r} and {values[j]!r} compute the same"
            )


# -- PoPE -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("phase_bias", [True, False])
def test_pope_attention_is_the_product_of_magnitudes_times_the_cosine_of_the_phase_offset(phase_bias):
    """Gopalakrishnan et al. 2025, §3: Σ_c softplus(q_c)·softplus(k_c)·cos((m − n)θ_c + δ_hc) / √d, θ_c =
    base^(−c/d), for a query at n and a key at m; δ set past its clamp [−2π, 0] on purpose in one channel."""
    encoder = build_encoder("pope", dim=DIM, num_heads=HEADS, base=100.0, phase_bias=phase_bias)
    d = DIM // HEADS
    delta = torch.zeros(HEADS, d, dtype=torch.float64)
    if phase_bias:
        with torch.no_grad():
            encoder.phase.copy_(-0.4 * torch.arange(HEADS * d).view(HEADS, d) / d)
            encoder.phase[0, 0] = 1.5  # clamped to 0
        delta = (-0.4 * torch.arange(HEADS * d).view(HEADS, d) / d).double()
        delta[0, 0] = 0.0
    theta = 100.0 ** (-torch.arange(d, dtype=torch.float64) / d)

    def scores(q, k):
        offset = (torch.arange(LENGTH)[None, :] - torch.arange(LENGTH)[:, None]).double()  # m − n
        angle = offset[None, :, :, None] * theta + delta[:, None, None, :]  # [H, n, m, c]
        magnitude = torch.einsum("bhnc,bhmc->bhnmc", F.softplus(q), F.softplus(k))
        return (magnitude * angle.cos()).sum(-1) / math.sqrt(d)

    check_layers(model_with(encoder), lambda _: scores, causal=True)
