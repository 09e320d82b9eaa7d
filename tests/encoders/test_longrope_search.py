"""LongRoPE's search (Ding et al. 2024, §3.2): the space it searches (1 ≤ λ_0 ≤ … ≤ λ_{d/2−1} ≤ 1 + s, a 0.01 grid),
where it starts (the factors PI, NTK, YaRN and Llama 3.1 imply), that it finds better factors than its
starts, and what attention computes with what it found; then the length study running it in a real run."""

from __future__ import annotations

import json
import math
import random

import pytest
import torch

from poslab.encoders import available_encoders, build_encoder, encoder_class
from poslab.encoders.longrope_search import (
    STEP,
    SearchBudget,
    admissible,
    crossover,
    evolve,
    is_admissible,
    mutate,
)
from tests.encoders.test_attention_computes import DIM, HEADS, LENGTH, check_layers, model_with
from tests.encoders.test_rope_scaling import llama3_reference, thetas

D = DIM // HEADS  # 16 channels a head: 8 frequencies


def monotone_in_range(factors, scale) -> bool:
    return (
        factors[0] >= 1.0
        and factors[-1] <= 1 + scale + 1e-9
        and all(a <= b for a, b in zip(factors, factors[1:], strict=False))
    )


def on_the_grid(factors) -> bool:
    return all(abs(v / STEP - round(v / STEP)) < 1e-6 for v in factors)


def test_admissible_moves_any_factors_into_the_search_space_and_leaves_admissible_ones_alone():
    assert admissible([0.5, 3.0, 2.0, 9.0], 4.0) == (1.0, 3.0, 3.0, 5.0)  # below 1, a dip, past 1 + s
    assert admissible([1.004, 1.5, 2.25, 4.0], 4.0) == (1.0, 1.5, 2.25, 4.0)
    assert is_admissible((1.0, 1.5, 2.25, 4.0), 4.0) and not is_admissible((1.0, 2.0, 1.5, 4.0), 4.0)
    assert is_admissible((1.0, 5.0), 4.0)  # the reference's candidates: np.arange(1.0, 1.0 + s + 0.01, 0.01)
    assert not is_admissible((0.99, 2.0), 4.0) and not is_admissible((1.0, 5.01), 4.0)


class Scripted(random.Random):
    """A generator whose ``random()`` returns the values given, in order (and counts them)."""

    def __init__(self, values):
        super().__init__(0)
        self.values, self.used = list(values), 0

    def random(self):
        self.used += 1
        return self.values.pop(0)


def test_crossover_swaps_one_factor_at_a_time_and_keeps_the_first_new_monotone_child():
    """dim_mono.py: from the better parent, a factor is visited with p 0.3 and swapped with p 0.5; a visit
    that leaves a seen or non-monotone child goes on from it (the swap is kept); the first good one returns."""
    first, second = (1.0, 1.0, 2.0, 3.0), (1.0, 2.5, 3.0, 3.0)
    # factor 0 visited, not swapped (the child is the parent: seen); factor 1 visited and swapped to 2.5 (not
    # monotone: 2.5 > 2.0); factor 2 not visited; factor 3 visited, swapped (3.0, the same: still not
    # monotone); second pass: factor 0 skipped, factor 1 skipped, factor 2 visited and swapped: (1, 2.5, 3, 3)
    rng = Scripted([0.1, 0.9, 0.2, 0.1, 0.5, 0.1, 0.2, 0.5, 0.5, 0.1, 0.4])
    assert crossover(first, second, 4.0, rng, {first}) == (1.0, 2.5, 3.0, 3.0)
    assert rng.used == 11 and not rng.values
    never = Scripted([0.9] * 4 * 20)  # nothing visited in the reference's 20 passes: no child
    assert crossover(first, second, 4.0, never, {first}) is None and never.used == 80


def test_mutation_and_crossover_give_new_candidates_inside_the_space():
    rng = random.Random(0)
    parents = [(1.0, 1.0, 2.0, 3.0, 3.5, 4.0), (1.0, 1.5, 1.5, 2.0, 4.0, 4.0)]
    seen = set(parents)
    for _ in range(200):
        child = mutate(rng.choice(parents), 4.0, rng, seen)
        assert child is not None and child not in seen and monotone_in_range(child, 4.0) and on_the_grid(child)
        crossed = crossover(*parents, 4.0, rng, seen)
        if crossed is not None:  # each factor from one parent or the other
            assert crossed not in seen and monotone_in_range(crossed, 4.0)
            assert all(c in (a, b) for c, a, b in zip(crossed, *parents, strict=True))
        seen |= {child} | ({crossed} if crossed else set())
    assert crossover(parents[0], parents[0], 4.0, rng, set()) is None  # one parent twice: nothing to cross


def test_the_search_beats_every_start_evaluates_each_candidate_once_and_repeats_with_its_seed():
    target = (1.0, 1.3, 1.9, 2.6, 3.1, 3.7, 4.0, 4.0)  # an admissible optimum none of the starts is
    start = {"flat": [4.0] * 8, "ramp": [4.0 ** (i / 7) for i in range(8)]}
    calls, scores = [], {}

    def fitness(factors):
        calls.append(factors)
        scores[factors] = sum((a - b) ** 2 for a, b in zip(factors, target, strict=True))
        return scores[factors]

    budget = SearchBudget(population=12, generations=10, seed=3)
    found = evolve(start, 4.0, fitness, budget)
    assert len(calls) == len(set(calls)) == found.evaluated <= 12 + 10 * 6
    assert all(monotone_in_range(c, 4.0) and on_the_grid(c) for c in calls)
    assert found.fitness == min(scores.values()) == scores[found.factors]
    assert found.fitness < min(found.start.values()) / 4 and set(found.start) == {"flat", "ramp"}
    assert found.start["flat"] == pytest.approx(sum((4.0 - t) ** 2 for t in target))
    again = evolve(start, 4.0, lambda f: sum((a - b) ** 2 for a, b in zip(f, target, strict=True)), budget)
    assert again.factors == found.factors
    other = evolve(
        start, 4.0, lambda f: sum((a - b) ** 2 for a, b in zip(f, target, strict=True)), SearchBudget(12, 10, seed=4)
    )
    assert other.factors != found.factors  # the seed drives the draws
    assert evolve(start, 4.0, fitness, SearchBudget(12, 0)).evaluated == 12  # no generations: the population


def rope(**options):
    return build_encoder("rope", dim=DIM, num_heads=HEADS, max_len=LENGTH, **options)


def test_rope_starts_from_pi_ntk_yarn_and_llama3_and_returns_longrope_with_what_it_found():
    s, d = 4.0, D
    seen = []

    def fitness(candidate):
        seen.append(candidate)
        return float(candidate.scaling.long_factor[3])  # rewards a slow interpolation of the fourth frequency

    found, result = rope().search_extension("longrope", s, fitness, SearchBudget(8, 6))
    assert all(c.scaling.type == "longrope" and c.scaling.factor == s for c in seen)
    assert result.start["linear"] == s  # PI: every λ_i = s
    ntk = [s ** (2 * i / (d - 2)) for i in range(d // 2)]  # base' = base·s^(d/(d−2)): λ_i = s^(2i/(d−2))
    assert seen[1].scaling.long_factor == pytest.approx([round(v, 2) for v in ntk], abs=1e-9)
    yarn = seen[2].scaling.long_factor
    assert yarn[0] == 1.0 and yarn[-1] == s and yarn == sorted(yarn)  # fast frequencies kept, slow ones divided
    llama3 = (thetas(10000.0, d) / llama3_reference(10000.0, d, s, LENGTH)).tolist()  # λ_i = θ_i / θ'_i
    assert seen[3].scaling.long_factor == pytest.approx([round(v, 2) for v in llama3], abs=1e-9)
    assert result.fitness == min(c.scaling.long_factor[3] for c in seen) < min(result.start.values())
    assert found.scaling.long_factor == list(result.factors) and result.factors[3] == result.fitness
    theta = 10000.0 ** (-2.0 * torch.arange(d // 2, dtype=torch.float64) / d)
    inverse, attention = found.frequencies()
    torch.testing.assert_close(inverse, theta / torch.tensor(result.factors, dtype=torch.float64))
    assert attention == pytest.approx(math.sqrt(1 + math.log(s) / math.log(LENGTH)))  # HF's LongRoPE factor
    with pytest.raises(NotImplementedError, match="no searched context extension 'yarn'"):
        rope().search_extension("yarn", s, fitness, SearchBudget(4, 0))


def test_attention_with_the_found_factors_rotates_by_theta_over_lambda_scaled_by_the_attention_factor():
    """softmax(a² Σ_j Re[q_j k_j* e^{i(n−m)θ_j/λ_j}] / √d) · v in the backbone, a = √(1 + ln s / ln L₀)."""
    s = 2.0

    def fitness(candidate):
        return -sum(candidate.scaling.long_factor)  # the most interpolated admissible factors: all s

    found, result = rope().search_extension("longrope", s, fitness, SearchBudget(6, 2))
    factors = torch.tensor(result.factors, dtype=torch.float64)
    a2 = 1 + math.log(s) / math.log(LENGTH)

    def scores(q, k):
        half = D // 2
        qc, kc = torch.complex(q[..., :half], q[..., half:]), torch.complex(k[..., :half], k[..., half:])
        theta = 10000.0 ** (-2.0 * torch.arange(half, dtype=torch.float64) / D) / factors
        offset = (torch.arange(LENGTH)[:, None] - torch.arange(LENGTH)[None, :]).double()
        rotation = torch.polar(torch.ones(LENGTH, LENGTH, half, dtype=torch.float64), offset[..., None] * theta)
        return a2 * torch.einsum("bhnj,bhmj,nmj->bhnm", qc, kc.conj(), rotation).real / math.sqrt(D)

    check_layers(model_with(found), lambda index: scores, causal=True)


def test_wrappers_search_their_rope_member_and_score_the_whole_encoder():
    """gemma3 searches its global layers (the local ones as trained); rnope its RoPE layers; a pattern
    or a composite its one RoPE member; two RoPE members would need one search over both: not offered."""
    budget = SearchBudget(4, 1)
    gemma = build_encoder("gemma3", dim=DIM, num_heads=HEADS, base=100.0, window=3, max_len=LENGTH)
    kinds = []
    found, _ = gemma.search_extension("longrope", 2.0, lambda c: kinds.append(type(c).__name__) or 0.0, budget)
    assert set(kinds) == {"Gemma3"} and found.global_layers.scaling.type == "longrope"
    assert found.scaling.type == "none" and found.for_layer(0) is found  # local layers untouched
    rnope = build_encoder("rnope", dim=DIM, num_heads=HEADS, max_len=LENGTH)
    assert rnope.search_extension("longrope", 2.0, lambda c: 0.0, budget)[0].scaling.type == "longrope"
    layered = build_encoder("rope,none", dim=DIM, num_heads=HEADS, rope={"max_len": LENGTH})
    assert "longrope" in layered.searched_extensions and "longrope" in layered.context_extensions
    found, _ = layered.search_extension("longrope", 2.0, lambda c: 0.0, budget)
    assert found.for_layer(0).scaling.type == "longrope" and found.for_layer(1).name == "none"
    twice = build_encoder("rope+rnope", dim=DIM, num_heads=HEADS, rope={"max_len": LENGTH}, rnope={"max_len": LENGTH})
    assert "longrope" not in twice.context_extensions and "yarn" in twice.context_extensions


def test_every_encoder_offering_a_searched_extension_offers_it_in_its_context_extensions():
    for name in available_encoders():
        cls = encoder_class(name)
        assert set(cls.searched_extensions) <= set(cls.context_extensions), name


def test_a_run_searches_longrope_at_each_length_and_scores_it_on_the_test_windows(tiny_text, tmp_path):
    from poslab.cli import main

    args = ["train", *tiny_text, "trainer.max_steps=12", "eval.multiples=[1,2,4]",
            "eval.rope_scaling=[linear,longrope]", "eval.search_population=4", "eval.search_generations=1",
            "eval.search_tokens=64"]  # fmt: skip
    assert main(args) == 0
    (summary,) = (tmp_path / "runs" / "text").glob("*/summary.json")
    recorded = json.loads(summary.read_text())
    metrics, table = recorded["metrics"], recorded["tables"]["lengen/searched"]
    assert {"lengen/loss@2x/longrope", "lengen/loss@4x/longrope", "lengen/loss@1x/longrope"} <= set(metrics)
    assert [row[:3] for row in table["rows"]] == [["longrope", 2, 32], ["longrope", 4, 64]]
    columns = table["columns"]
    for row in table["rows"]:
        values = dict(zip(columns, row, strict=True))
        assert len({values[f"val_loss_{s}"] for s in ("linear", "ntk", "yarn", "llama3")}) > 1  # scored, not constant
        assert values["val_loss"] <= min(values[f"val_loss_{s}"] for s in ("linear", "ntk", "yarn", "llama3"))
        factors = [float(v) for v in values["factors"].split()]
        assert len(factors) == 8 and monotone_in_range(factors, values["multiple"])
