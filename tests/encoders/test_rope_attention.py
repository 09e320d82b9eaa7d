"""What attention computes with ``rope`` for every value of its options: partial rotary (GPT-NeoX), p-RoPE, and
each context scaling (PI, NTK, dynamic NTK, YaRN, Llama 3.1, LongRoPE) as the encoder applies it, against the
frequencies and attention factor each paper (or Hugging Face's ``modeling_rope_utils``) defines, written out here.

logits = a² · Σ_j Re[(q_a + i q_b)(k_a − i k_b) e^{i(p_q − p_k)θ_j}]/√d over the rotated channels, plus the plain
dot product of the channels left alone; a is the attention factor, carried by both q and k.
"""

from __future__ import annotations

import math

import pytest
import torch

from poslab.encoders import build_encoder
from poslab.positions import Positions
from tests.encoders.test_attention_computes import DIM, HEADS, attention_from_scores, model_with, recorded_attention
from tests.encoders.test_rope_scaling import llama3_reference
from tests.encoders.test_text_encoders import yarn_reference

HEAD_DIM = DIM // HEADS  # 16
STEPS = [3, 4, 9, 10, 11, 20, 21, 40, 41, 77, 78, 100]  # positions are data: gaps, no arange


def ladder(base: float, dim: int) -> torch.Tensor:
    """RoFormer eq. 15: θ_j = base^(−2j/d), j < d/2, over the d rotated channels."""
    return base ** (-2.0 * torch.arange(dim // 2, dtype=torch.float64) / dim)


def rope_scores(theta: torch.Tensor, layout: str, steps: list[int], factor: float = 1.0):
    """Scores with len(θ) pairs rotated over the first 2·len(θ) channels (the layout's pairing within them)."""
    rotated = 2 * len(theta)
    angle = torch.tensor(steps, dtype=torch.float64)[:, None] * theta  # [L, P]
    offset = angle[:, None, :] - angle[None, :, :]

    def scores(q, k):
        if layout == "half":
            a, b = list(range(rotated // 2)), list(range(rotated // 2, rotated))
        else:
            a, b = list(range(0, rotated, 2)), list(range(1, rotated, 2))
        qc, kc = torch.complex(q[..., a], q[..., b]), torch.complex(k[..., a], k[..., b])
        turned = torch.einsum("bhnj,bhmj,nmj->bhnm", qc, kc.conj(), torch.polar(torch.ones_like(offset), offset)).real
        rest = q[..., rotated:] @ k[..., rotated:].transpose(-1, -2)
        return (factor**2 * turned + rest) / math.sqrt(q.shape[-1])

    return scores


def check(encoder, scores, steps: list[int] = STEPS, causal: bool = True, steps_end: int | None = None) -> None:
    model = model_with(encoder, depth=2, causal=causal)
    torch.manual_seed(1)
    x = torch.randn(2, len(steps), DIM)
    pos = Positions(steps=torch.tensor(steps), steps_end=steps_end)
    for index, ((inputs, out), block) in enumerate(zip(recorded_attention(model, x, pos), model.blocks, strict=True)):
        expected = attention_from_scores(block.attn, inputs, scores, causal)
        torch.testing.assert_close(out.double(), expected, rtol=2e-4, atol=2e-5, msg=f"layer {index}")


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize(("fraction", "rotated"), [(1.0, 16), (0.5, 8), (0.25, 4), (0.3, 4)])
def test_partial_rotary_turns_the_first_channels_with_the_whole_ladder_over_them(layout, fraction, rotated):
    """GPT-NeoX partial rotary: the first 2·⌊d·f/2⌋ channels rotate, the ladder θ_j = base^(−2j/rot) laid over
    them (so it still spans 1 … 1/base), pairs formed within them; the other channels carry no position."""
    encoder = build_encoder("rope", dim=DIM, num_heads=HEADS, base=100.0, layout=layout, rotary_fraction=fraction)
    check(encoder, rope_scores(ladder(100.0, rotated), layout, STEPS))


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize(("fraction", "kept"), [(0.0, 0), (0.25, 2), (0.5, 4), (0.75, 6), (1.0, 8)])
def test_p_rope_keeps_the_top_of_the_full_ladder_in_either_layout(layout, fraction, kept):
    """Barbero et al. 2025, §5: the highest p of the frequencies kept, the lowest set to 0 (p = 0: NoPE)."""
    theta = ladder(100.0, HEAD_DIM)
    theta[kept:] = 0.0
    encoder = build_encoder("rope", dim=DIM, num_heads=HEADS, base=100.0, layout=layout, frequency_fraction=fraction)
    check(encoder, rope_scores(theta, layout, STEPS))


def scaled(kind: str, **options):
    return build_encoder("rope", dim=DIM, num_heads=HEADS, max_len=16, scaling={"type": kind, **options})


@pytest.mark.parametrize("s", [2.0, 8.0])
@pytest.mark.parametrize("causal", [True, False])
def test_linear_and_ntk_scalings_in_attention(s, causal):
    """PI (Chen et al. 2023): θ_j/s. NTK-aware (bloc97 2023; HF ``_compute_dynamic_ntk_parameters`` without the
    length): base·s^(d/(d−2)). Neither scales the logits."""
    check(scaled("linear", factor=s), rope_scores(ladder(1e4, HEAD_DIM) / s, "half", STEPS), causal=causal)
    grown = 1e4 * s ** (HEAD_DIM / (HEAD_DIM - 2))
    check(scaled("ntk", factor=s), rope_scores(ladder(grown, HEAD_DIM), "half", STEPS), causal=causal)


@pytest.mark.parametrize("s", [1.0, 2.0])
@pytest.mark.parametrize(("steps_end", "length"), [(None, max(STEPS) + 1), (200, 200), (512, 512)])
def test_dynamic_ntk_grows_the_base_with_the_datas_stated_length_or_the_token_count(s, steps_end, length):
    """emozilla 2023 (HF ``_compute_dynamic_ntk_parameters``): base′ = base·(s·l/L₀ − (s − 1))^(d/(d−2)) with
    l = max(the sequence length, L₀), L₀ = 8 here: the length is the data's stated end of the steps, else the
    last step + 1 (the positions are data: not the token count, 12, of these gapped steps)."""
    original = 8
    encoder = build_encoder(
        "rope", dim=DIM, num_heads=HEADS, max_len=original, scaling={"type": "dynamic", "factor": s}
    )
    l_ = max(length, original)
    grown = 1e4 * (s * l_ / original - (s - 1)) ** (HEAD_DIM / (HEAD_DIM - 2))
    check(encoder, rope_scores(ladder(grown, HEAD_DIM), "half", STEPS), steps_end=steps_end)


@pytest.mark.parametrize(("beta_fast", "beta_slow"), [(32.0, 1.0), (4.0, 1.0), (32.0, 0.25)])
def test_yarn_in_attention_interpolates_by_parts_and_scales_the_logits_by_the_factor_squared(beta_fast, beta_slow):
    """Peng et al. 2023 (eqs. 17-22): the per-dimension blend of θ and θ/s between the β and α rotation counts,
    and √(1/t) = 0.1·ln s + 1 on q and on k, so the logits by its square."""
    s, context = 8.0, 2048
    theta, _, _ = yarn_reference(s, HEAD_DIM, context, alpha=beta_slow, beta=beta_fast)
    encoder = build_encoder("rope", dim=DIM, num_heads=HEADS, scaling={"type": "yarn", "factor": s,
                            "original_max_len": context, "beta_fast": beta_fast, "beta_slow": beta_slow})  # fmt: skip
    steps = [0, 5, 100, 900, 2000, 4000, 9000, 16000]
    check(encoder, rope_scores(theta, "half", steps, 0.1 * math.log(s) + 1), steps=steps)


@pytest.mark.parametrize(("low", "high"), [(1.0, 4.0), (2.0, 8.0)])
def test_llama3_in_attention(low, high):
    s, original = 4.0, 64
    options = {"factor": s, "original_max_len": original, "low_freq_factor": low, "high_freq_factor": high}
    encoder = build_encoder("rope", dim=DIM, num_heads=HEADS, scaling={"type": "llama3", **options})
    theta = llama3_reference(1e4, HEAD_DIM, s, original, low, high)
    check(encoder, rope_scores(theta, "half", STEPS))


@pytest.mark.parametrize(("s", "attention_factor", "expected_factor"), [
    (32.0, None, math.sqrt(1 + math.log(32) / math.log(16))),  # √(1 + ln s / ln L₀), the long factors
    (1.0, None, 1.0),  # within the context: the short factors, no scaling
    (4.0, 1.5, 1.5),  # given
])  # fmt: skip
def test_longrope_in_attention_divides_each_frequency_and_scales_the_logits(s, attention_factor, expected_factor):
    """Ding et al. 2024, eq. 3 (HF ``_compute_longrope_parameters``): θ_j/λ_j, λ the long factors past L₀ and the
    short ones within it; the attention factor on q and k."""
    long, short = [1.0 + j for j in range(8)], [1.0 + 0.1 * j for j in range(8)]
    options = {"long_factor": long, "short_factor": short, "factor": s, "original_max_len": 16}
    if attention_factor is not None:
        options["attention_factor"] = attention_factor
    encoder = build_encoder("rope", dim=DIM, num_heads=HEADS, scaling={"type": "longrope", **options})
    factors = torch.tensor(long if s > 1 else short, dtype=torch.float64)
    check(encoder, rope_scores(ladder(1e4, HEAD_DIM) / factors, "half", STEPS, expected_factor))
