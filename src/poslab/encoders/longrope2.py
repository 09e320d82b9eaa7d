"""``longrope2``: RoPE that ends its training with LongRoPE2's context extension (Shang et al. 2025, "LongRoPE2:
Near-Lossless LLM Context Window Scaling", §3.2–3.3; reference: microsoft/LongRoPE and the training code it
points to, microsoft/nnscaler ``examples/longrope2``).

RoPE for the first part of training. At the start of the last ``extend`` fraction of the optimiser steps, its
per-frequency factors for ``factor`` × the training context L₀ are searched on the model as trained so far
(RoPE's ``longrope2`` search, :mod:`poslab.encoders.longrope_search`: a critical dimension, NTK below it,
factors in [s, 2s] from it on, scored by the loss of needle tokens), then training goes on with mixed context
windows (§3.3): a ``short_share`` of the steps on windows of L₀ with the original RoPE, the others on windows
of ``factor`` × L₀ with the searched factors (about as many tokens a step: rows ``factor`` times fewer).
The paper packs short documents into rows of the target length with attention masked between them and
positions restarting per document; rows of L₀ compute the same. Which frequencies a sequence gets follows the
reference's switch (Hugging Face's LongRoPE): the searched ones past L₀ (``max(position) + 1 > L₀``), the
original ones within it, in training, validation and every evaluation; past L₀ cos and sin are multiplied by the
reference's √(1 + ln s / ln L₀) (the paper names no attention factor; the reference applies it within L₀ too,
where this keeps the original RoPE, as the paper describes).

The extension has a learning-rate schedule of its own, as the reference fine-tunes (nnscaler ``run.sh``: 2e-5,
40 warm-up steps of 2,250, cosine to 0; 2e-5 is about a fifteenth of LLaMA 3 8B's pretraining peak): from the
phase's start, linear over its first ``extend_warmup`` to ``extend_lr`` × ``optim.lr``, then cosine to 0.
``extend_lr=null`` keeps the run's schedule.
"""

from __future__ import annotations

import math
from typing import Annotated, Optional

import torch

from poslab.config.ranges import FRACTION, POSITIVE, Base, OptionalCount, Range
from poslab.encoders.longrope_search import SearchResult
from poslab.encoders.registry import register_encoder
from poslab.encoders.rope import RoPE
from poslab.encoders.rope_scaling import default_inv_freq
from poslab.encoders.rotary import LastInputCache, Layout
from poslab.positions import steps_end


@register_encoder("longrope2")
class LongRoPE2(RoPE):
    paper = "Shang et al. 2025"
    reads = "steps"
    context_extensions = ()  # it extends by training with its own searched factors
    searched_extensions = ()
    length_driven_extensions = ()
    needs = ("longer_rows",)

    def __init__(
        self,
        dim: int,
        num_heads: int,
        base: Base = 10000.0,
        layout: Layout = "half",  # half | interleaved, as rope
        factor: Annotated[int, Range(2)] = 8,  # the target context, × the training context
        extend: Annotated[float, Range(0, 1, low_open=True)] = 0.125,  # the last fraction of training, extending
        short_share: Annotated[float, FRACTION] = 0.3,  # of the extending steps on L₀ (the paper's Table 1: 3 of 10 B)
        extend_lr: Annotated[Optional[float], POSITIVE] = 0.1,  # × optim.lr in the extension; null: the run's
        extend_warmup: Annotated[float, FRACTION] = 0.02,  # of the extension, linear from 0 (the reference's 40 / 2250)
        max_len: OptionalCount = None,  # None: the training context
    ) -> None:
        super().__init__(dim, num_heads, base=base, layout=layout, max_len=max_len)
        self.factor, self.extend, self.short_share = factor, extend, short_share
        self.extend_lr, self.extend_warmup = extend_lr, extend_warmup
        self.progress = 0.0
        # What the search found, in the checkpoint (a resumed run does not search again): d_rcd (-1: not yet) and
        # the searched factors in hundredths (their grid; integers, which no change of dtype rounds); the factors
        # below d_rcd follow from them. `found` mirrors them in Python, so no step reads the device.
        frequencies = self.rot_dim // 2
        self.register_buffer("critical_dim", torch.tensor(-1))
        self.register_buffer("hundredths", torch.zeros(frequencies, dtype=torch.long))
        self.register_load_state_dict_post_hook(lambda module, keys: module._read_found())
        self.found: tuple[float, ...] | None = None  # every frequency's λ_i once searched

    # -- training ------------------------------------------------------------------
    def train_progress(self, fraction: float) -> None:
        self.progress = fraction

    @property
    def extending(self) -> bool:
        return self.training and self.progress >= 1.0 - self.extend

    def complete_from(self) -> float:
        return 1.0 - self.extend

    def training_multiples(self) -> tuple[int, ...]:
        return (1, self.factor)

    def training_multiple(self, step: int) -> int:
        """The target multiple for the long steps of the extension, 1 for its short ones and before it: step k is
        short where ⌊(k + 1)·share⌋ > ⌊k·share⌋, so any stretch of steps holds the share (a resumed run the same)."""
        if not self.extending:
            return 1
        short = math.floor((step + 1) * self.short_share) > math.floor(step * self.short_share)
        return 1 if short else self.factor

    def search_in_training(self) -> tuple[str, float] | None:
        """("longrope2", factor) once the extension starts and until its search is taken."""
        return ("longrope2", float(self.factor)) if self.extending and self.found is None else None

    def search_extension(self, kind, factor, fitness, budget):
        if kind != "longrope2":
            return super().search_extension(kind, factor, fitness, budget)
        return self.searched(kind, factor, fitness, budget)

    def take_search(self, result: SearchResult) -> None:
        """Keep what the search found: the factors used past the training context from now on."""
        cd = result.critical_dim or 0
        self.critical_dim.fill_(cd)
        self.hundredths.zero_()
        self.hundredths[cd:] = torch.tensor([round(100 * f) for f in result.factors[cd:]])
        self._read_found()

    def _read_found(self) -> None:
        cd = int(self.critical_dim)
        searched = [h / 100 for h in self.hundredths[cd:].tolist()] if cd >= 0 else None
        self.found = None if searched is None else (*(searched[0] ** (i / cd) for i in range(cd)), *searched)
        self._freqs, self._rows = {}, LastInputCache()

    def learning_rate_factor(self, fraction: float) -> float | None:
        start = 1.0 - self.extend
        if self.extend_lr is None or fraction < start:
            return None
        phase = (fraction - start) / self.extend
        if phase < self.extend_warmup:
            return self.extend_lr * phase / self.extend_warmup
        return self.extend_lr * 0.5 * (1 + math.cos(math.pi * (phase - self.extend_warmup) / (1 - self.extend_warmup)))

    # -- frequencies -----------------------------------------------------------------
    def length_key(self, pos, steps: torch.Tensor) -> int:
        if self.scaling.type != "none" or self.max_len is None:  # a copy the search scores: its scaling decides
            return super().length_key(pos, steps)
        length = steps_end(pos) or steps.shape[-1]
        return length if length > self.max_len else 0

    def frequencies(self, seq_len: int = 0, device: torch.device | str | None = None) -> tuple[torch.Tensor, float]:
        """The original frequencies within the training context; past it θ_i / λ_i with the searched λ and
        √(1 + ln s / ln L₀) (RoPE's before the search)."""
        if self.scaling.type != "none" or self.found is None or seq_len <= (self.max_len or seq_len):
            return super().frequencies(seq_len, device)
        factors = torch.tensor(self.found, dtype=torch.float64, device=device)
        return default_inv_freq(self.base, self.rot_dim, device) / factors, self.attention_factor()

    def attention_factor(self) -> float:
        """The reference's √(1 + ln s / ln L₀) past the training context."""
        return math.sqrt(1 + math.log(self.factor) / math.log(self.max_len))

    def length_dependent(self) -> bool:
        return True

    def extra_repr(self) -> str:
        return (f"{super().extra_repr()}, factor={self.factor}, extend={self.extend}, short_share={self.short_share}, "
                f"extend_lr={self.extend_lr}, searched={self.found is not None}")  # fmt: skip
