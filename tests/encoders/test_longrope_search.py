"""LongRoPE's search (Ding et al. 2024, §3.2) and LongRoPE2's (Shang et al. 2025, §3.2). LongRoPE's: the space it
searches (1 ≤ λ_0 ≤ … ≤ λ_{d/2−1} ≤ 1 + s, a 0.01 grid),
where it starts (the factors PI, NTK, YaRN and Llama 3.1 imply), that it finds better factors than its
starts, and what attention computes with what it found; LongRoPE2's critical dimensions, its NTK below them and
its search above them; then the length study running both in a real run."""

from __future__ import annotations

import json
import math
import random
import re

import pytest
import torch

from poslab.encoders import available_encoders, build_encoder, encoder_class
from poslab.encoders.longrope_search import STEP, CriticalSpace, FactorSpace, SearchBudget, critical_dims, evolve
from poslab.errors import ConfigError
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


def admissible(factors, scale):
    return FactorSpace.longrope(scale).admissible(factors)


def is_admissible(factors, scale):
    return FactorSpace.longrope(scale).is_admissible(factors)


def mutate(factors, scale, rng, seen):
    return FactorSpace.longrope(scale).mutate(factors, rng, seen)


def crossover(first, second, scale, rng, seen):
    return FactorSpace.longrope(scale).crossover(first, second, rng, seen)


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
    start = {"flat": admissible([4.0] * 8, 4.0), "ramp": admissible([4.0 ** (i / 7) for i in range(8)], 4.0)}
    space = FactorSpace.longrope(4.0)
    calls, scores = [], {}

    def fitness(factors):
        calls.append(factors)
        scores[factors] = sum((a - b) ** 2 for a, b in zip(factors, target, strict=True))
        return scores[factors]

    budget = SearchBudget(population=12, generations=10, seed=3)
    found = evolve(start, space, fitness, budget)
    assert len(calls) == len(set(calls)) == found.evaluated <= 12 + 10 * 6
    assert all(monotone_in_range(c, 4.0) and on_the_grid(c) for c in calls)
    assert found.fitness == min(scores.values()) == scores[found.factors]
    assert found.fitness < min(found.start.values()) / 4 and set(found.start) == {"flat", "ramp"}
    assert found.start["flat"] == pytest.approx(sum((4.0 - t) ** 2 for t in target))
    again = evolve(start, space, lambda f: sum((a - b) ** 2 for a, b in zip(f, target, strict=True)), budget)
    assert again.factors == found.factors
    other = evolve(
        start, space, lambda f: sum((a - b) ** 2 for a, b in zip(f, target, strict=True)), SearchBudget(12, 10, seed=4)
    )
    assert other.factors != found.factors  # the seed drives the draws
    assert evolve(start, space, fitness, SearchBudget(12, 0)).evaluated == 12  # no generations: the population


def rope(**options):
    return build_encoder("rope", dim=DIM, num_heads=HEADS, **{"max_len": LENGTH, **options})


def test_rope_starts_from_pi_ntk_yarn_and_llama3_and_returns_longrope_with_what_it_found():
    s, d = 4.0, D
    seen = []

    def fitness(candidate, objective):
        assert objective == "loss"  # LongRoPE is scored by the loss of held-out windows
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

    def fitness(candidate, objective):
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
    found, _ = gemma.search_extension(
        "longrope", 2.0, lambda c, objective: kinds.append(type(c).__name__) or 0.0, budget
    )
    assert set(kinds) == {"Gemma3"} and found.global_layers.scaling.type == "longrope"
    assert found.scaling.type == "none" and found.for_layer(0) is found  # local layers untouched
    rnope = build_encoder("rnope", dim=DIM, num_heads=HEADS, max_len=LENGTH)
    assert rnope.search_extension("longrope", 2.0, lambda c, objective: 0.0, budget)[0].scaling.type == "longrope"
    layered = build_encoder("rope,none", dim=DIM, num_heads=HEADS, rope={"max_len": LENGTH})
    assert "longrope" in layered.searched_extensions and "longrope" in layered.context_extensions
    found, _ = layered.search_extension("longrope", 2.0, lambda c, objective: 0.0, budget)
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


# -- LongRoPE2 ---------------------------------------------------------------------------------------------------


def period(base: float, rotated: int, i: int) -> float:
    return 2 * math.pi * base ** (2 * i / rotated)


@pytest.mark.parametrize(
    ("base", "rotated", "trained", "expected"),
    [(1e4, 96, 2048, (19, 31)), (5e5, 128, 8192, (24, 35)), (1e4, 16, 64, (1, 3))],
)
def test_longrope2_seeks_its_critical_dimension_from_a_tenth_of_the_context_to_eq_7(base, rotated, trained, expected):
    """LongRoPE2 §1: d_tcd is 31 for Phi3-mini (d 96, base 1e4, 2k) and 35 for LLaMA3-8B (d 128, base 5e5, 8k);
    Algorithm 1 starts the search where the period fits ten times into the context (19 and 24)."""
    low, high = critical_dims(base, rotated, trained)
    assert (low, high) == expected
    assert period(base, rotated, high - 1) < trained <= period(base, rotated, high)  # the first period reaching L
    assert period(base, rotated, low - 1) < trained / 10 <= period(base, rotated, low)
    assert critical_dims(1e4, 16, 16) == (0, 1)  # no period below L / 10: from the first dimension


def test_longrope2_sets_the_factors_below_the_critical_dimension_by_ntk_from_the_first_searched_one():
    """The released LLaMA3-8B long_factor (nnscaler ``llama3_8b_longrope2_config.json``) is λ_i = 21.81^(i/33) below
    its critical dimension 33; that is NTK with base' = base · λ_33^(d/(2·33)): θ'_i = θ_i / λ_i there."""
    space = CriticalSpace.longrope2(16.0, 64)
    tail = tuple(round(21.81 + 0.02 * j, 2) for j in range(31))
    factors = space.factors((33, *tail))
    assert len(factors) == 64 and factors[33:] == tail and space.critical_dim((33, *tail)) == 33
    assert factors[:33] == pytest.approx([21.81 ** (i / 33) for i in range(33)], rel=1e-12)
    base, d = 5e5, 128
    raised = base * 21.81 ** (d / (2 * 33))
    for i in range(33):
        assert base ** (-2 * i / d) / raised ** (-2 * i / d) == pytest.approx(factors[i], rel=1e-9)
    assert space.is_admissible((33, *tail)) and not space.is_admissible((33, 15.99, *tail[1:]))  # below s
    assert not space.is_admissible((33, *tail[:-1], 32.01)) and not space.is_admissible((32, *tail))  # past 2s; short


def test_longrope2_mutations_and_crossovers_keep_the_critical_dimension_and_search_s_to_2s():
    space, rng = CriticalSpace.longrope2(4.0, 8), random.Random(1)
    parents = [space.start(2), (2, 4.0, 4.5, 5.0, 6.0, 8.0, 8.0), space.start(3)]
    assert parents[0] == (2, 4.0, 4.0, 4.0, 4.0, 4.0, 4.0) and parents[2] == (3, 4.0, 4.0, 4.0, 4.0, 4.0)
    seen = set(parents)
    for _ in range(200):
        parent = rng.choice(parents)
        child = space.mutate(parent, rng, seen)
        assert child is not None and child not in seen and child[0] == parent[0] and space.is_admissible(child)
        assert 4.0 <= child[1] and child[-1] <= 8.0 and on_the_grid(child[1:])
        crossed = space.crossover(parents[0], parents[1], rng, seen)
        if crossed is not None:
            assert crossed[0] == 2 and all(c in (a, b) for c, a, b in zip(crossed, parents[0], parents[1], strict=True))
        seen |= {child} | ({crossed} if crossed else set())
    assert space.crossover(parents[0], parents[2], rng, set()) is None  # d_rcd 2 and 3: not crossed


def test_longrope2_search_finds_the_critical_dimension_and_factors_of_the_optimum():
    space = CriticalSpace.longrope2(4.0, 8)
    target = space.factors((3, 4.0, 4.3, 5.1, 6.2, 7.4))  # λ_2 = 4^(2/3) < s: only d_rcd 3 reaches it

    def fitness(factors):
        return sum((a - b) ** 2 for a, b in zip(factors, target, strict=True))

    start = {f"cd{cd}": space.start(cd) for cd in range(1, 6)}
    found = evolve(start, space, fitness, SearchBudget(16, 12, seed=0))
    assert found.critical_dim == 3 and found.fitness < min(found.start.values()) / 20
    assert found.factors[:3] == pytest.approx([found.factors[3] ** (i / 3) for i in range(3)])


def test_rope_searches_longrope2_from_each_critical_dimension_by_the_needle_and_applies_it_as_longrope():
    s = 4.0
    seen = []

    def fitness(candidate, objective):
        assert objective == "needle" and candidate.scaling.type == "longrope" and candidate.scaling.factor == s
        seen.append(candidate.scaling.long_factor)
        return candidate.scaling.long_factor[5]  # rewards a slow interpolation of the sixth frequency

    found, result = rope(max_len=64).search_extension("longrope2", s, fitness, SearchBudget(8, 4))
    # periods 2π·1e4^(2i/16): 6.3, 19.9, 62.8, 198.7, …: from the first reaching 6.4 to the first reaching 64
    assert list(result.start) == ["cd1", "cd2", "cd3"]
    assert seen[0] == pytest.approx([1.0] + [s] * 7) and seen[1] == pytest.approx([1.0, 2.0] + [s] * 6)
    assert seen[2] == pytest.approx([1.0, s ** (1 / 3), s ** (2 / 3)] + [s] * 5)
    for factors in seen:  # NTK below some critical dimension in 1..3, s ≤ … ≤ 2s from it on
        cd = next(c for c in (3, 2, 1) if factors[:c] == pytest.approx([factors[c] ** (i / c) for i in range(c)]))
        assert s <= factors[cd] and factors[-1] <= 2 * s and factors[cd:] == sorted(factors[cd:])
    assert result.fitness == min(f[5] for f in seen) and result.critical_dim in (1, 2, 3)
    assert found.scaling.long_factor == list(result.factors) and len(seen) == result.evaluated
    inverse, attention = found.frequencies()
    theta = 10000.0 ** (-2.0 * torch.arange(D // 2, dtype=torch.float64) / D)
    torch.testing.assert_close(inverse, theta / torch.tensor(result.factors, dtype=torch.float64))
    assert attention == pytest.approx(math.sqrt(1 + math.log(s) / math.log(64)))  # the reference's mscale
    with pytest.raises(ConfigError, match="longrope2 extension needs max_len"):
        build_encoder("rope", dim=DIM, num_heads=HEADS).search_extension("longrope2", s, fitness, SearchBudget(4, 0))


def test_a_run_searches_longrope2_on_needles_where_its_prompt_fits_and_notes_why_elsewhere(tiny_text, tmp_path):
    from poslab.cli import main

    args = ["train", *tiny_text, "trainer.max_steps=12", "eval.multiples=[1,2,8]", "eval.rope_scaling=[longrope2]",
            "data.tokenizer=bpe", "data.vocab_size=300",  # bytes: the needle's sentences in any text
            "eval.search_population=4", "eval.search_generations=1", "eval.search_tokens=256"]  # fmt: skip
    assert main(args) == 0
    (summary,) = (tmp_path / "runs" / "text").glob("*/summary.json")
    recorded = json.loads(summary.read_text())
    assert "lengen/loss@8x/longrope2" in recorded["metrics"] and "lengen/loss@2x/longrope2" not in recorded["metrics"]
    lengen = recorded["tables"]["lengen/loss"]
    (note,) = [row[-1] for row in lengen["rows"] if row[:2] == ["longrope2", 2]]
    assert re.fullmatch(r"a needle prompt takes \d+ tokens, more than a length of 32", note)
    table = recorded["tables"]["lengen/searched"]
    (row,) = table["rows"]
    values = dict(zip(table["columns"], row, strict=True))
    assert values["variant"] == "longrope2" and values["multiple"] == 8 and values["critical_dim"] in (0, 1)
    assert {"val_loss_cd0", "val_loss_cd1"} <= set(values) and values["val_loss"] <= values["val_loss_cd1"]
    factors = [float(v) for v in values["factors"].split()]
    assert len(factors) == 8 and 8 <= factors[1] and factors[-1] <= 16 and factors[1:] == sorted(factors[1:])
