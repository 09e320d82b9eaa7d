"""Expected outcomes that an experiment's YAML states and its report checks.

One line per expectation, ``"<encoders>: <metric> <op> <right side>"``:

* encoders: a name, ``*`` (every encoder of the experiment) or ``*-none``
  (every encoder but ``none``; any ``-name`` list works); with variants
  (``compare_variants``) a name is ``encoder/variant``, and a bare encoder
  name covers each of its variants;
* op: ``<``, ``<=``, ``>``, ``>=``;
* ``<encoders>/mean``: the mean over each encoder's variants (``<encoder>/<variant>``) of their means, as a
  benchmark's row averages its horizons; ``encoder/mean:metric`` names one on the right side;
* ``best <encoders>``: one check, which holds when it holds for at least one of them; the row names the
  encoder that does best (the widest margin);
* right side: a number (``factor * number``), a metric of the same encoder, ``factor * metric``, or
  another encoder's metric as ``encoder:metric`` (``factor * encoder:metric``).

e.g. ``"alibi: lengen/loss@4x <= 1.05 * lengen/loss@1x"``,
``"*-none: test/acc >= 0.95"``, ``"cyclic: test/mse < none:test/mse"`` or
``"best */mean: test/mse <= 1.05 * 0.469"`` (within 5 % of a published mean).
Values are means over seeds.
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass

from poslab.errors import ConfigError

OPS = {"<=": operator.le, ">=": operator.ge, "<": operator.lt, ">": operator.gt}
MEAN = "mean"  # the variant name ``<encoder>/mean`` stands for the mean over an encoder's variants
PATTERN = re.compile(r"^\s*(?P<who>[^:]+):\s*(?P<lhs>\S+)\s*(?P<op><=|>=|<|>)\s*(?P<rhs>.+?)\s*$")


@dataclass(frozen=True)
class Expectation:
    text: str
    encoders: tuple[str, ...]  # empty: every encoder
    excluded: tuple[str, ...]
    metric: str
    op: str
    factor: float | None  # rhs = factor * rhs_metric, or a constant when rhs_metric is None
    rhs_metric: str | None
    constant: float | None
    best: bool = False  # one check over the encoders: held when it holds for one
    over_variants: bool = False  # of ``<encoder>/mean``, the mean over each encoder's variants

    @classmethod
    def parse(cls, text: str) -> Expectation:
        match = PATTERN.match(text)
        if not match:
            raise ConfigError(f"expectation {text!r} is not '<encoders>: <metric> <op> <value>'")
        who, rhs = match["who"].strip(), match["rhs"]
        best = who.startswith("best ")
        who = who.removeprefix("best ").strip()
        over_variants = who.endswith(f"/{MEAN}")
        parts = who.removesuffix(f"/{MEAN}").split("-")
        encoders = () if parts[0] == "*" else (parts[0],)
        excluded = tuple(p for p in parts[1:] if p)
        factor, rhs_metric, constant = None, None, None
        if "*" in rhs:
            left, right = (x.strip() for x in rhs.split("*", 1))
            factor, rhs_metric = float(left), right
            try:  # a factor of a published number: ``1.05 * 0.469``
                constant, factor, rhs_metric = factor * float(right), None, None
            except ValueError:
                pass
        else:
            try:
                constant = float(rhs)
            except ValueError:
                factor, rhs_metric = 1.0, rhs.strip()
        return cls(text, encoders, excluded, match["lhs"], match["op"], factor, rhs_metric, constant, best,
                   over_variants)  # fmt: skip

    def applies_to(self, label: str) -> bool:
        """Whether it states something of ``label`` (an encoder, ``encoder/variant`` or ``encoder/mean``)."""
        encoder, _, variant = label.partition("/")
        if self.over_variants != (variant == MEAN):
            return False
        names = {label, encoder}
        return (not self.encoders or bool(names & set(self.encoders))) and not names & set(self.excluded)

    def sides(
        self, means: dict[str, float], others: dict[str, dict[str, float]] | None = None
    ) -> tuple[float | None, float | None]:
        """(left, bound): the left metric and what it is compared with; None for a metric not reported."""
        left = means.get(self.metric)
        if self.rhs_metric is None:
            return left, self.constant
        if ":" in self.rhs_metric:
            encoder, metric = self.rhs_metric.split(":", 1)
            right = (others or {}).get(encoder, {}).get(metric)
        else:
            right = means.get(self.rhs_metric)
        return left, None if right is None else right * (self.factor or 1.0)

    def margin(self, means: dict[str, float], others: dict[str, dict[str, float]] | None = None) -> float | None:
        """How far inside (positive) or outside its bound one encoder's left metric is."""
        left, bound = self.sides(means, others)
        if left is None or bound is None:
            return None
        return bound - left if self.op.startswith("<") else left - bound

    def check(
        self, means: dict[str, float], others: dict[str, dict[str, float]] | None = None
    ) -> tuple[bool | None, str]:
        """(held, detail) for one encoder's mean metrics; held is None when a metric is missing.

        ``others``: every encoder's means, for right sides that name another encoder.
        """
        left, bound = self.sides(means, others)
        if left is None or bound is None:
            missing = self.metric if left is None else self.rhs_metric
            return None, f"{missing} not reported"
        return OPS[self.op](left, bound), f"{left:.4f} {self.op} {bound:.4f}"


def variant_means(means: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """``<encoder>/mean`` for each encoder run with variants: the mean of its variants' means, metric by metric
    (those every variant reports), as a benchmark's row is the mean over its horizons."""
    by_encoder: dict[str, list[dict[str, float]]] = {}
    for label, values in means.items():
        encoder, _, variant = label.partition("/")
        if variant and variant != MEAN:
            by_encoder.setdefault(encoder, []).append(values)
    return {
        f"{encoder}/{MEAN}": {k: sum(v[k] for v in runs) / len(runs) for k in set.intersection(*map(set, runs))}
        for encoder, runs in by_encoder.items()
    }
