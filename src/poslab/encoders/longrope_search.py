"""LongRoPE's evolutionary search for per-frequency rescale factors (Ding et al. 2024, §3.2, Algorithm 1).

LongRoPE divides each rotary frequency θ_i by its own factor λ_i (eq. 3) and finds the λ by search, scored
by the loss at the target length, instead of deriving them from a rule as PI (λ_i = s), NTK and YaRN do.
The search space is the one of the reference code (microsoft/LongRoPE, ``evolution/algorithms/dim_mono.py``):

* 1 ≤ λ_0 ≤ λ_1 ≤ … ≤ λ_{d/2−1} ≤ 1 + s — a slower frequency is never interpolated less than a faster
  one, and the slowest up to 1 + s (the reference's candidates, ``np.arange(1.0, 1.0 + scale + step, step)``,
  end there);
* values on a grid of :data:`STEP`;
* the starting population holds the rules' own factors (PI, NTK, YaRN, …), filled up with mutations of them;
* each generation keeps the best half as parents and adds a quarter of mutations (sweeps over the factors,
  each redrawn with probability 0.3 between its neighbours, the changes accumulating until the candidate is
  new and monotone) and a quarter of crossovers (from the better parent, one factor at a time taken from
  the other: the first new monotone child is the one kept), every candidate new.

Pure Python on purpose: the search itself is microseconds next to one fitness evaluation (a forward pass at
the target length), and a seeded :class:`random.Random` makes it repeatable on every rank.
"""

from __future__ import annotations

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


@dataclass(frozen=True)
class SearchBudget:
    """How much search: ``population`` candidates, ``generations`` rounds of ``population / 2`` new ones
    (``population + generations · population / 2`` fitness evaluations at most)."""

    population: int = 16
    generations: int = 6
    seed: int = 0


@dataclass(frozen=True)
class SearchResult:
    factors: Factors
    fitness: float
    start: dict[str, float]  # each starting rule's fitness, by name
    evaluated: int


def on_grid(value: float) -> float:
    return round(round(value / STEP) * STEP, 6)


def ceiling(scale: float) -> float:
    """The largest factor searched: 1 + s (the end of the reference's candidate list)."""
    return on_grid(1.0 + scale)


def admissible(factors: Sequence[float], scale: float) -> Factors:
    """``factors`` moved into the search space: on the grid, in [1, 1 + s], non-decreasing (a running maximum)."""
    out, floor = [], 1.0
    for value in factors:
        floor = max(floor, min(on_grid(value), ceiling(scale)))
        out.append(floor)
    return tuple(out)


def is_admissible(factors: Sequence[float], scale: float) -> bool:
    pairs = zip(factors, factors[1:], strict=False)
    return factors[0] >= 1.0 and factors[-1] <= ceiling(scale) and all(a <= b for a, b in pairs)


def mutate(factors: Factors, scale: float, rng: random.Random, seen: set[Factors]) -> Factors | None:
    """A new admissible candidate: sweeps over the factors, each redrawn with probability :data:`REDRAW` on the
    grid between its neighbours (1 below the first, 1 + s above the last), the changes of one sweep kept for
    the next (``dim_mono.py``'s ``mutate``)."""
    top = ceiling(scale)
    child = list(factors)
    for _ in range(TRIES):
        for i in range(len(child)):
            if rng.random() < REDRAW:
                low = child[i - 1] if i > 0 else 1.0
                high = child[i + 1] if i + 1 < len(child) else top
                steps = round((high - low) / STEP)
                child[i] = on_grid(low + STEP * rng.randint(0, max(steps, 0)))
        candidate = tuple(child)
        if candidate not in seen and is_admissible(candidate, scale):
            return candidate
    return None


def crossover(first: Factors, second: Factors, scale: float, rng: random.Random, seen: set[Factors]) -> Factors | None:
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
                if candidate not in seen and is_admissible(candidate, scale):
                    return candidate
    return None


def evolve(
    start: dict[str, Sequence[float]],
    scale: float,
    fitness: Callable[[Factors], float],
    budget: SearchBudget,
) -> SearchResult:
    """The factors of lowest ``fitness`` found from the named starting rules within ``budget``."""
    rng = random.Random(budget.seed)
    scores: dict[Factors, float] = {}

    def score(candidate: Factors) -> None:
        if candidate not in scores:
            scores[candidate] = float(fitness(candidate))

    seeds = {name: admissible(values, scale) for name, values in start.items()}
    for candidate in seeds.values():
        score(candidate)
    population = list(dict.fromkeys(seeds.values()))
    for _ in range(TRIES * budget.population):
        if len(population) >= budget.population:
            break
        child = mutate(rng.choice(population), scale, rng, set(scores))
        if child is not None:
            score(child)
            population.append(child)
    parents_size = max(2, budget.population // 2)
    for _ in range(budget.generations):
        parents = sorted(population, key=scores.__getitem__)[:parents_size]
        children: list[Factors] = []
        for n in range(budget.population - len(parents)):
            seen = set(scores) | set(children)
            if n % 2 == 0:
                child = mutate(rng.choice(parents), scale, rng, seen)
            else:
                a, b = sorted(rng.sample(parents, 2), key=scores.__getitem__)  # the better parent first
                child = crossover(a, b, scale, rng, seen) or mutate(a, scale, rng, seen)
            if child is not None:
                score(child)
                children.append(child)
        population = parents + children
    best = min(scores, key=scores.__getitem__)
    return SearchResult(best, scores[best], {name: scores[c] for name, c in seeds.items()}, len(scores))
