"""Expected outcomes that an experiment's YAML states and its report checks.

One line per expectation, ``"<encoders>: <metric> <op> <right side>"``:

* encoders: a name, ``*`` (every encoder of the experiment) or ``*-none``
  (every encoder but ``none``; any ``-name`` list works); with variants
  (``compare_variants``) a name is ``encoder/variant``, and a bare encoder
  name covers each of its variants;
* op: ``<``, ``<=``, ``>``, ``>=``;
* right side: a number, a metric of the same encoder, ``factor * metric``, or
  another encoder's metric as ``encoder:metric`` (``factor * encoder:metric``).

e.g. ``"alibi: lengen/loss@4x <= 1.05 * lengen/loss@1x"``,
``"*-none: test/acc >= 0.95"`` or ``"cyclic: test/mse < none:test/mse"``.
Values are means over seeds.
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass

from poslab.errors import ConfigError

OPS = {"<=": operator.le, ">=": operator.ge, "<": operator.lt, ">": operator.gt}
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

    @classmethod
    def parse(cls, text: str) -> Expectation:
        match = PATTERN.match(text)
        if not match:
            raise ConfigError(f"expectation {text!r} is not '<encoders>: <metric> <op> <value>'")
        who, rhs = match["who"].strip(), match["rhs"]
        parts = who.split("-")
        encoders = () if parts[0] == "*" else (parts[0],)
        excluded = tuple(p for p in parts[1:] if p)
        factor, rhs_metric, constant = None, None, None
        if "*" in rhs:
            left, right = (x.strip() for x in rhs.split("*", 1))
            factor, rhs_metric = float(left), right
        else:
            try:
                constant = float(rhs)
            except ValueError:
                factor, rhs_metric = 1.0, rhs.strip()
        return cls(text, encoders, excluded, match["lhs"], match["op"], factor, rhs_metric, constant)

    def applies_to(self, label: str) -> bool:
        """Whether it states something of ``label`` (an encoder, or ``encoder/variant``)."""
        names = {label, label.split("/")[0]}
        return (not self.encoders or bool(names & set(self.encoders))) and not names & set(self.excluded)

    def check(
        self, means: dict[str, float], others: dict[str, dict[str, float]] | None = None
    ) -> tuple[bool | None, str]:
        """(held, detail) for one encoder's mean metrics; held is None when a metric is missing.

        ``others``: every encoder's means, for right sides that name another encoder.
        """
        left = means.get(self.metric)
        if self.rhs_metric is None:
            right = self.constant
        elif ":" in self.rhs_metric:
            encoder, metric = self.rhs_metric.split(":", 1)
            right = (others or {}).get(encoder, {}).get(metric)
        else:
            right = means.get(self.rhs_metric)
        if left is None or right is None:
            missing = self.metric if left is None else self.rhs_metric
            return None, f"{missing} not reported"
        bound = right * (self.factor or 1.0) if self.rhs_metric else right
        return OPS[self.op](left, bound), f"{left:.4f} {self.op} {bound:.4f}"
