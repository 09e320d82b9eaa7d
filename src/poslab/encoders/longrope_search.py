"""The evolutionary searches for per-frequency rescale factors of LongRoPE (Ding et al. 2024, §3.2, Algorithm 1)
and LongRoPE2 (Shang et al. 2025, §3.2, Algorithms 1–2).

Both divide each rotary frequency θ_i by its own factor λ_i (LongRoPE eq. 3) and find the λ by search, scored
by a loss at the target length, instead of deriving them from a rule as PI (λ_i = s), NTK and YaRN do. They
search different spaces, each the one of the reference code (microsoft/LongRoPE,
``evolution/algorithms/dim_mono.py``), over which the same genetic algorithm runs (:func:`evolve`):

* :class:`FactorSpace` — LongRoPE: every factor, 1 ≤ λ_0 ≤ λ_1 ≤ … ≤ λ_{d/2−1} ≤ 1 + s (a slower frequency is
  never interpolated less than a faster one; the reference's candidates, ``np.arange(1.0, 1.0 + scale + step,
  step)``, end at 1 + s), on a grid of :data:`STEP`;
* :class:`CriticalSpace` — LongRoPE2: a candidate is a critical dimension d_rcd and the factors of the
  dimensions from it on, s ≤ λ_{d_rcd} ≤ … ≤ 2s (Algorithm 1 line 4); the faster dimensions below it follow
  NTK from it, λ_i = λ_{d_rcd}^(i/d_rcd) (Algorithm 2 lines 7–8; ``dim_mono.py``'s ``ntk_left``), so they are
  never searched. d_rcd is sought between the dimension whose period fits ten times into the training context
  and the theoretical critical dimension (eq. 7): :func:`critical_dims`.

The algorithm: the starting population holds the given candidates (the rules' own factors), filled up with
mutations of them; each generation keeps the best half as parents and adds a quarter of mutations (sweeps over
the factors, each redrawn with probability 0.3 between its neighbours, the changes accumulating until the
candidate is new and monotone) and a quarter of crossovers (from the better parent, one factor at a time taken
from the other: the first new monotone child is the one kept), every candidate new. LongRoPE2's operators leave
a candidate's d_rcd as it is (the reference searches one d_rcd per run); parents of different d_rcd do not
cross, and the better one is mutated instead.

Pure Python on purpose: the search itself is microseconds next to one fitness evaluation (a forward pass at
the target length), and a seeded :class:`random.Random` makes it repeatable on every rank.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

#: The grid of the factors (the reference's step for its fastest frequencies).
STEP = 0.01
#: The probability that a mutation redraws one factor (the reference's 0.3).
REDRAW = 0.3
#: Sweeps over the factors before a mutation gives up (the reference sweeps until it succeeds).
TRIES = 50
#: Passes of a crossover over the factors before it gives up (the reference's ``max_crossover_try``).
CROSSOVER_TRIES = 20

Factors = tuple[float, ...]
#: What a space searches: the factors themselves (LongRoPE), or d_rcd followed by the searched factors (LongRoPE2).
Candidate = tuple[float, ...]


@dataclass(frozen=True)
class SearchBudget:
    """How much search: ``population`` candidates, ``generations`` rounds of ``population / 2`` new ones
    (``population + generations · population / 2`` fitness evaluations at most)."""

    population: int = 16
    generations: int = 6
    seed: int = 0


@dataclass(frozen=True)
class SearchResult:
    factors: Factors  # every frequency's λ_i
    fitness: float
    start: dict[str, float]  # each starting candidate's fitness, by name
    evaluated: int
    critical_dim: int | None = None  # LongRoPE2's d_rcd: the first searched dimension


def on_grid(value: float) -> float:
    return round(round(value / STEP) * STEP, 6)


def ceiling(scale: float) -> float:
    """The largest factor LongRoPE searches: 1 + s (the end of the reference's candidate list)."""
    return on_grid(1.0 + scale)


@dataclass(frozen=True)
class FactorSpace:
    """Non-decreasing factors on the grid in [``low``, ``high``], every one searched: LongRoPE's space
    (:meth:`longrope`), and the searched part of LongRoPE2's."""

    low: float
    high: float

    @classmethod
    def longrope(cls, scale: float) -> FactorSpace:
        return cls(1.0, ceiling(scale))

    def factors(self, candidate: Candidate) -> Factors:
        return tuple(candidate)

    def critical_dim(self, candidate: Candidate) -> int | None:
        return None

    def admissible(self, factors: Sequence[float]) -> Candidate:
        """``factors`` moved into the space: on the grid, in [low, high], non-decreasing (a running maximum)."""
        out, floor = [], self.low
        for value in factors:
            floor = max(floor, min(on_grid(value), self.high))
            out.append(floor)
        return tuple(out)

    def is_admissible(self, factors: Sequence[float]) -> bool:
        pairs = zip(factors, factors[1:], strict=False)
        return factors[0] >= self.low and factors[-1] <= self.high and all(a <= b for a, b in pairs)

    def mutate(self, factors: Candidate, rng: random.Random, seen: set[Candidate]) -> Candidate | None:
        """A new admissible candidate: sweeps over the factors, each redrawn with probability :data:`REDRAW` on
        the grid between its neighbours (``low`` below the first, ``high`` above the last), the changes of one
        sweep kept for the next (``dim_mono.py``'s ``mutate``)."""
        child = list(factors)
        for _ in range(TRIES):
            for i in range(len(child)):
                if rng.random() < REDRAW:
                    below = child[i - 1] if i > 0 else self.low
                    above = child[i + 1] if i + 1 < len(child) else self.high
                    steps = round((above - below) / STEP)
                    child[i] = on_grid(below + STEP * rng.randint(0, max(steps, 0)))
            candidate = tuple(child)
            if candidate not in seen and self.is_admissible(candidate):
                return candidate
        return None

    def crossover(
        self, first: Candidate, second: Candidate, rng: random.Random, seen: set[Candidate]
    ) -> Candidate | None:
        """``dim_mono.py``'s ``crossover``: from the better parent ``first``, each factor visited with probability
        :data:`REDRAW` takes ``second``'s with probability 0.5; the first visit that leaves a new admissible child
        returns it (a swap that does not is kept, as there); None after :data:`CROSSOVER_TRIES` passes."""
        if first == second:
            return None
        child = list(first)
        for _ in range(CROSSOVER_TRIES):
            for i in range(len(child)):
                if rng.random() < REDRAW:
                    if rng.random() < 0.5:
                        child[i] = second[i]
                    candidate = tuple(child)
                    if candidate not in seen and self.is_admissible(candidate):
                        return candidate
        return None


def critical_dims(base: float, rotated: int, original: int) -> tuple[int, int]:
    """The range LongRoPE2 seeks its real critical dimension d_rcd in (Algorithm 1 line 2), as frequency indices:
    from the first dimension whose period 2π·base^(2i/d) reaches a tenth of the training context L to the
    theoretical critical dimension d_tcd = ⌈(d/2)·log_base(L / 2π)⌉ (eq. 7), the first whose period reaches L
    (``rotated`` = d channels; kept inside the d/2 frequencies, one of them searched at least)."""
    half = rotated // 2

    def first_reaching(period: float) -> int:
        return min(max(0, math.ceil(half * math.log(period / (2 * math.pi)) / math.log(base))), half - 1)

    return first_reaching(original / 10), first_reaching(original)


@dataclass(frozen=True)
class CriticalSpace:
    """LongRoPE2's space: a candidate is ``(d_rcd, λ_{d_rcd}, …, λ_{d/2−1})``, the searched factors in ``tail``
    (s ≤ … ≤ 2s); the factors below d_rcd follow NTK, λ_i = λ_{d_rcd}^(i/d_rcd) (:meth:`factors`)."""

    tail: FactorSpace
    frequencies: int  # d/2

    @classmethod
    def longrope2(cls, scale: float, frequencies: int) -> CriticalSpace:
        return cls(FactorSpace(on_grid(scale), on_grid(2 * scale)), frequencies)

    def start(self, critical_dim: int) -> Candidate:
        """d_rcd with every searched factor at s, the low end of Algorithm 1's draw (PI on those dimensions)."""
        return (critical_dim, *[self.tail.low] * (self.frequencies - critical_dim))

    def factors(self, candidate: Candidate) -> Factors:
        cd, searched = int(candidate[0]), candidate[1:]
        return (*(searched[0] ** (i / cd) for i in range(cd)), *searched)

    def critical_dim(self, candidate: Candidate) -> int | None:
        return int(candidate[0])

    def is_admissible(self, candidate: Candidate) -> bool:
        return len(candidate) == 1 + self.frequencies - int(candidate[0]) and self.tail.is_admissible(candidate[1:])

    def mutate(self, candidate: Candidate, rng: random.Random, seen: set[Candidate]) -> Candidate | None:
        cd = candidate[0]
        child = self.tail.mutate(candidate[1:], rng, {c[1:] for c in seen if c[0] == cd})
        return None if child is None else (cd, *child)

    def crossover(
        self, first: Candidate, second: Candidate, rng: random.Random, seen: set[Candidate]
    ) -> Candidate | None:
        if first[0] != second[0]:  # the reference crosses within one d_rcd only
            return None
        child = self.tail.crossover(first[1:], second[1:], rng, {c[1:] for c in seen if c[0] == first[0]})
        return None if child is None else (first[0], *child)


def evolve(
    start: dict[str, Candidate],
    space: FactorSpace | CriticalSpace,
    fitness: Callable[[Factors], float],
    budget: SearchBudget,
) -> SearchResult:
    """The factors of lowest ``fitness`` found in ``space`` from the named admissible ``start`` candidates
    within ``budget``."""
    rng = random.Random(budget.seed)
    scores: dict[Candidate, float] = {}

    def score(candidate: Candidate) -> None:
        if candidate not in scores:
            scores[candidate] = float(fitness(space.factors(candidate)))

    for candidate in start.values():
        score(candidate)
    population = list(dict.fromkeys(start.values()))
    for _ in range(TRIES * budget.population):
        if len(population) >= budget.population:
            break
        child = space.mutate(rng.choice(population), rng, set(scores))
        if child is not None:
            score(child)
            population.append(child)
    parents_size = max(2, budget.population // 2)
    for _ in range(budget.generations):
        parents = sorted(population, key=scores.__getitem__)[:parents_size]
        children: list[Candidate] = []
        for n in range(budget.population - len(parents)):
            seen = set(scores) | set(children)
            if n % 2 == 0:
                child = space.mutate(rng.choice(parents), rng, seen)
            else:
                a, b = sorted(rng.sample(parents, 2), key=scores.__getitem__)  # the better parent first
                child = space.crossover(a, b, rng, seen) or space.mutate(a, rng, seen)
            if child is not None:
                score(child)
                children.append(child)
        population = parents + children
    best = min(scores, key=scores.__getitem__)
    return SearchResult(
        space.factors(best), scores[best], {name: scores[c] for name, c in start.items()}, len(scores),
        space.critical_dim(best),
    )  # fmt: skip
