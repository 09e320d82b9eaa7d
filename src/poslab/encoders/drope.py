"""``drope``: train with RoPE, then drop it and recalibrate (Gelberg et al. 2026, "Extending the Context of
Pretrained LLMs by Dropping Their Positional Embeddings", ICLR, §5.1; reference: SakanaAI/DroPE).

RoPE for the first part of training, then no rotation in any layer (cos = 1, sin = 0, as the reference
patches its attention) for the last ``recalibrate`` fraction of the optimiser steps: the paper's
from-scratch recipe drops RoPE for the last 2 of 16 B tokens (0.125) at the same context length and
finds the model then runs past its training length without any RoPE scaling, beyond PI, NTK and YaRN.
The drop is abrupt, as the paper's. Validation and every evaluation run the model as DroPE delivers
it, without RoPE (so the best checkpoint is one after the drop). The paper's optional softmax
temperature at evaluation (fitted per length) is not applied.

The recalibration has a learning-rate schedule of its own, as the reference trains it
(``cfgs/trainer_cfg/base_trainer.yaml``: ``lr_scheduler_type: constant``, ``warmup_ratio: 0.1``; the
run configs' ``learning_rate: 3e-4``): from the drop, a linear warmup over the first ``recalibrate_warmup``
of the recalibration steps to ``recalibrate_lr`` × ``optim.lr``, then constant. Without it a one-cycle run
would recalibrate at 4 % of its peak rate. ``recalibrate_lr=null`` keeps the run's schedule.
"""

from __future__ import annotations

from typing import Annotated, Optional

from poslab.config.ranges import FRACTION, POSITIVE, Base, Range
from poslab.encoders.registry import register_encoder
from poslab.encoders.rope import RoPE
from poslab.encoders.rotary import Layout


@register_encoder("drope")
class DroPE(RoPE):
    paper = "Gelberg et al. 2026"
    reads = "steps"
    context_extensions = ()  # it extends by having no rotation to extend
    searched_extensions = ()
    length_driven_extensions = ()

    def __init__(
        self,
        dim: int,
        num_heads: int,
        base: Base = 10000.0,
        layout: Layout = "half",  # half | interleaved, as rope
        recalibrate: Annotated[float, Range(0, 1, low_open=True)] = 0.125,  # the last fraction of training without RoPE
        recalibrate_lr: Annotated[Optional[float], POSITIVE] = 1.0,  # × optim.lr after the drop; null: the run's
        recalibrate_warmup: Annotated[float, FRACTION] = 0.1,  # of the recalibration, linear from 0 (the reference's)
    ) -> None:
        super().__init__(dim, num_heads, base=base, layout=layout)
        self.recalibrate, self.recalibrate_lr, self.recalibrate_warmup = recalibrate, recalibrate_lr, recalibrate_warmup
        self.progress = 0.0

    def train_progress(self, fraction: float) -> None:
        self.progress = fraction

    @property
    def dropped(self) -> bool:
        """No rotation: in the last ``recalibrate`` of training, and whenever the model is not training."""
        return not self.training or self.progress >= 1.0 - self.recalibrate

    def complete_from(self) -> float:
        return 1.0 - self.recalibrate

    def rotate(self, x, pos):
        return x if self.dropped else super().rotate(x, pos)

    def learning_rate_factor(self, fraction: float) -> float | None:
        """After the drop: ``recalibrate_lr`` reached linearly over the first ``recalibrate_warmup`` of the
        recalibration, then constant; before it (or with ``recalibrate_lr`` null), the run's schedule."""
        start = 1.0 - self.recalibrate
        if self.recalibrate_lr is None or fraction < start:
            return None
        phase = (fraction - start) / self.recalibrate
        warm = min(1.0, phase / self.recalibrate_warmup) if self.recalibrate_warmup else 1.0
        return self.recalibrate_lr * warm

    def extra_repr(self) -> str:
        return (f"{super().extra_repr()}, recalibrate={self.recalibrate}, recalibrate_lr={self.recalibrate_lr}, "
                f"recalibrate_warmup={self.recalibrate_warmup}")  # fmt: skip
