"""``rope``: Rotary Position Embedding (Su et al. 2021, "RoFormer", eq. 34).

Queries and keys are rotated pairwise by angles p·θ_i, so q·k depends only on
the offset m − n (tested, both layouts, against the complex form).

* ``layout``: ``half`` (GPT-NeoX / HF ``rotate_half``) or ``interleaved``
  (original / GPT-J / Meta adjacent pairs) — see :mod:`poslab.encoders.rotary`.
* ``rotary_fraction``: rotate only the first fraction of each head's channels
  (GPT-NeoX uses 0.25).
* ``scaling``: a context extension (:mod:`poslab.encoders.rope_scaling`):
  ``linear`` (PI), ``ntk``, ``dynamic``, ``yarn``; ``original_max_len`` null =
  ``max_len``, the training context the data reports.

cos/sin tables are built from float64 angles reduced modulo 2π, cached on the
device and grown (doubling) when a longer position arrives; within one forward
pass every layer reuses the rows of the batch's positions.
"""

from __future__ import annotations

import copy
from dataclasses import asdict

import torch

from poslab.encoders.base import PositionEncoder
from poslab.encoders.registry import register_encoder
from poslab.encoders.rope_scaling import RopeScaling, scaled_frequencies
from poslab.encoders.rotary import LastInputCache, Layout, apply_cos_sin, rotation_angles
from poslab.errors import ConfigError


@register_encoder("rope")
class RoPE(PositionEncoder):
    modalities = ("text", "timeseries")
    reads = "steps"
    context_extensions = ("linear", "ntk", "dynamic", "yarn")

    def __init__(
        self,
        dim: int,
        num_heads: int,
        base: float = 10000.0,
        layout: Layout = "half",
        rotary_fraction: float = 1.0,
        scaling: RopeScaling | None = None,
        max_len: int | None = None,
    ) -> None:
        super().__init__(dim, num_heads)
        self.rot_dim = 2 * int(self.head_dim * rotary_fraction / 2)
        if not 0 < self.rot_dim <= self.head_dim:
            raise ConfigError(f"rope: rotary_fraction={rotary_fraction} leaves no channel pair to rotate")
        self.base = base
        self.layout = layout
        self.rotary_fraction = rotary_fraction
        self.max_len = max_len
        self.scaling = scaling if isinstance(scaling, RopeScaling) else RopeScaling(**(scaling or {}))
        if self.scaling.type in ("dynamic", "yarn") and not (self.scaling.original_max_len or max_len):
            raise ConfigError(f"rope scaling '{self.scaling.type}' needs scaling.original_max_len or max_len")
        self._table: tuple | None = None  # (key, cos [N, R], sin [N, R])
        self._rows = LastInputCache()

    # -- frequencies ---------------------------------------------------------------
    def frequencies(self, seq_len: int = 0) -> tuple[torch.Tensor, float]:
        """(inverse frequencies float64, attention factor) at this sequence length."""
        return scaled_frequencies(
            self.scaling, base=self.base, dim=self.rot_dim, original_max_len=self.max_len, seq_len=seq_len
        )

    def extended(self, kind: str, factor: float) -> RoPE:
        """A copy with a context extension, for evaluation past the training length."""
        clone = copy.deepcopy(self)
        original = self.scaling.original_max_len or self.max_len
        clone.scaling = RopeScaling(
            **{**asdict(self.scaling), "type": kind, "factor": factor, "original_max_len": original}
        )
        clone._table, clone._rows = None, LastInputCache()
        return clone

    # -- cos / sin -----------------------------------------------------------------------
    def _cos_sin(self, steps: torch.Tensor, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        steps = steps.to(device)
        length = int(steps.max()) + 1
        dynamic = self.scaling.type == "dynamic"
        inv_freq, factor = self.frequencies(seq_len=length if dynamic else 0)
        integral = not steps.is_floating_point() or torch.equal(steps, steps.round())
        if not integral or int(steps.min()) < 0:
            angles = rotation_angles(steps, inv_freq.to(device))
            return angles.cos() * factor, angles.sin() * factor
        key = (device, inv_freq.sum().item(), factor)
        if self._table is None or self._table[0] != key or self._table[1].shape[0] < length:
            size = 1 << max(length - 1, 1).bit_length()  # grow by doubling
            angles = rotation_angles(torch.arange(size, device=device), inv_freq.to(device))
            self._table = (key, angles.cos() * factor, angles.sin() * factor)
        index = steps.long()
        return self._table[1][index], self._table[2][index]

    def rotate(self, x, pos):
        steps = self.field(pos)

        def rows(s: torch.Tensor):
            cos, sin = self._cos_sin(s, x.device)
            if cos.dim() == 3:  # [B, L, R] -> [B, 1, L, R]
                cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
            return cos, sin

        cos, sin = self._rows.get(steps, rows)
        return apply_cos_sin(x, cos, sin, self.layout)

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, base={self.base}, layout={self.layout}, "
            f"rot_dim={self.rot_dim}, scaling={self.scaling.type}x{self.scaling.factor}"
        )
