"""``rope``: Rotary Position Embedding (Su et al. 2021, "RoFormer", eq. 34).

Queries and keys are rotated pairwise by angles p·θ_i, so q·k depends only on
the offset m − n (tested, both layouts, against the complex form).

* ``layout``: ``half`` (GPT-NeoX / HF ``rotate_half``) or ``interleaved``
  (original / GPT-J / Meta adjacent pairs) — see :mod:`poslab.encoders.rotary`.
* ``rotary_fraction``: rotate only the first fraction of each head's channels
  (GPT-NeoX uses 0.25); the frequency ladder is laid over those channels, so
  it still spans 1 … 1/base.
* ``frequency_fraction``: p-RoPE (Barbero et al. 2025, "Round and Round We
  Go", §5): keep the highest fraction p of the frequencies 1/base^(2i/d) and
  set the lowest to 0, so their channels carry no position (p = 0 is NoPE,
  p = 1 RoPE). Unlike ``rotary_fraction`` the kept frequencies are the top of
  the full ladder: p = 0.25 rotates by 1 … base^(−1/4) only.
* ``window``: sliding-window attention of W tokens in the layers this encoder
  serves (Mistral 7B; the local layers of Gemma 2/3, Cohere's RNoPE-SWA and
  SWAN-GPT, whose global layers go without position: ``rnope`` with a
  window).
* ``scaling``: a context extension (:mod:`poslab.encoders.rope_scaling`):
  ``linear`` (PI), ``ntk``, ``dynamic``, ``yarn``, ``llama3`` and ``longrope``
  (each also tried at evaluation by the length study; ``longrope``'s
  per-frequency factors searched there for each length on validation data,
  and as LongRoPE2 searches them, ``longrope2``:
  :mod:`poslab.encoders.longrope_search`); ``original_max_len`` null =
  ``max_len``, the training context the data reports. At evaluation only,
  ``dca``: the same frequencies read through Dual Chunk Attention
  (:mod:`poslab.encoders.dual_chunk`).

cos/sin come from float64 angles reduced modulo 2π, computed once per forward
pass from the batch's own positions (every layer reuses them; the data module
hands the same steps tensor to every batch of one length, so they are made once
per length) with the inverse frequencies kept on the device: no host
synchronisation on the per-step path.
"""

from __future__ import annotations

import copy
from dataclasses import asdict

import torch

from poslab.config.ranges import Base, OptionalCount, PartOf1, ZeroToOne
from poslab.encoders.base import PositionEncoder
from poslab.encoders.dual_chunk import DualChunk
from poslab.encoders.longrope_search import CriticalSpace, FactorSpace, critical_dims, evolve
from poslab.encoders.registry import register_encoder
from poslab.encoders.rope_scaling import NEED_ORIGINAL, RopeScaling, scaled_frequencies
from poslab.encoders.rotary import LastInputCache, Layout, apply_cos_sin, rotation_angles
from poslab.errors import ConfigError
from poslab.positions import steps_end


@register_encoder("rope")
class RoPE(PositionEncoder):
    paper = "Su et al. 2021"
    reads = "steps"
    context_extensions = ("linear", "ntk", "dynamic", "yarn", "llama3", "longrope", "longrope2", "dca")
    length_driven_extensions = ("dynamic",)
    searched_extensions = ("longrope", "longrope2")
    #: The rules whose factors start LongRoPE's search (Ding et al. 2024, §3.2: PI, NTK and YaRN).
    SEARCH_START = ("linear", "ntk", "yarn", "llama3")

    def __init__(
        self,
        dim: int,
        num_heads: int,
        base: Base = 10000.0,
        layout: Layout = "half",  # half (GPT-NeoX / HF rotate_half) | interleaved (original / GPT-J / Meta)
        rotary_fraction: PartOf1 = 1.0,  # rotate this fraction of each head's channels (GPT-NeoX partial rotary: 0.25)
        scaling: RopeScaling
        | None = None,  # e.g. {type: yarn, factor: 4}; types: none linear ntk dynamic yarn llama3 longrope
        max_len: OptionalCount = None,  # None: the training context (the length scalings extend from)
        frequency_fraction: ZeroToOne = 1.0,  # p-RoPE: keep the highest fraction p of the frequencies, zero the rest
        window: OptionalCount = None,  # sliding-window attention of W tokens in its layers; None: global
    ) -> None:
        super().__init__(dim, num_heads)
        self.frequency_fraction = frequency_fraction
        self.window = window
        self.rot_dim = 2 * int(self.head_dim * rotary_fraction / 2)
        if not 0 < self.rot_dim <= self.head_dim:
            raise ConfigError(f"rope: rotary_fraction={rotary_fraction} leaves no channel pair to rotate")
        self.base = base
        self.layout = layout
        self.rotary_fraction = rotary_fraction
        self.max_len = max_len
        self.scaling = scaling if isinstance(scaling, RopeScaling) else RopeScaling(**(scaling or {}))
        if self.scaling.type in NEED_ORIGINAL and not (self.scaling.original_max_len or max_len):
            raise ConfigError(f"rope scaling '{self.scaling.type}' needs scaling.original_max_len or max_len")
        self._freqs: dict[tuple, tuple[torch.Tensor, float]] = {}
        self._rows = LastInputCache()

    # -- frequencies ---------------------------------------------------------------
    def frequencies(self, seq_len: int = 0, device: torch.device | str | None = None) -> tuple[torch.Tensor, float]:
        """(inverse frequencies float64 on ``device``, attention factor) at this sequence length."""
        inv_freq, factor = scaled_frequencies(
            self.scaling, base=self.base, dim=self.rot_dim, original_max_len=self.max_len, seq_len=seq_len,
            device=device,
        )  # fmt: skip
        if self.frequency_fraction < 1.0:  # p-RoPE: the lowest frequencies (last in the ladder) become 0
            kept = round(self.frequency_fraction * len(inv_freq))
            inv_freq = torch.cat((inv_freq[:kept], torch.zeros_like(inv_freq[kept:])))
        return inv_freq, factor

    def attention_window(self) -> int | None:
        return self.window

    def length_dependent(self) -> bool:
        return self.scaling.type in self.length_driven_extensions

    def extended(self, kind: str, factor: float) -> RoPE | DualChunk:
        """A copy with a context extension, for evaluation past the training length (``dca``: the same
        frequencies read through Dual Chunk Attention, which has no factor)."""
        original = self.scaling.original_max_len or self.max_len
        if kind == "dca":
            if original is None:
                raise ConfigError("rope's dca extension needs max_len (the training context)")
            return DualChunk(self.frequencies()[0], self.layout, self.dim, self.num_heads, int(original))
        clone = copy.deepcopy(self)
        clone.scaling = RopeScaling(
            **{**asdict(self.scaling), "type": kind, "factor": factor, "original_max_len": original}
        )
        clone._freqs, clone._rows = {}, LastInputCache()
        return clone

    def search_extension(self, kind, factor, fitness, budget):
        """The per-frequency factors λ_i (θ_i / λ_i, Ding et al. 2024, eq. 3) of lowest ``fitness``, applied as
        ``longrope`` is. ``longrope``: every λ_i searched, from the factors PI, NTK, YaRN and Llama 3.1's rule
        imply (θ_i / θ'_i), scored by the loss. ``longrope2`` (Shang et al. 2025, §3.2): λ_i in [s, 2s] from a
        critical dimension on, NTK below it, from each critical dimension of :func:`critical_dims` with every
        searched λ_i = s, scored by the loss of needle tokens (the ``needle`` objective)."""
        if kind not in self.searched_extensions:
            return super().search_extension(kind, factor, fitness, budget)
        return self.searched(kind, factor, fitness, budget)

    def searched(self, kind, factor, fitness, budget):
        """:meth:`search_extension`'s search, for a subclass that runs it other than as an extension."""
        original = self.frequencies()[0]
        if kind == "longrope2":
            space = CriticalSpace.longrope2(factor, len(original))
            trained = self.scaling.original_max_len or self.max_len
            if trained is None:
                raise ConfigError("rope's longrope2 extension needs max_len (the training context)")
            low, high = critical_dims(self.base, self.rot_dim, int(trained))
            start = {f"cd{cd}": space.start(cd) for cd in range(low, high + 1)}
            objective = "needle"
        else:
            space = FactorSpace.longrope(factor)
            start = {
                rule: space.admissible(
                    torch.nan_to_num(original / self.extended(rule, factor).frequencies()[0], nan=1.0).tolist()
                )
                for rule in self.SEARCH_START
            }  # p-RoPE's zeroed frequencies: 0 / 0, any factor does (1)
            objective = "loss"
        found = evolve(start, space, lambda factors: fitness(self.with_long_factor(factor, factors), objective), budget)
        return self.with_long_factor(factor, found.factors), found

    def with_long_factor(self, factor: float, long_factor) -> RoPE:
        """The ``longrope`` extension by ``factor`` with the per-frequency factors ``long_factor``."""
        clone = self.extended("longrope", factor)
        clone.scaling.long_factor = list(long_factor)
        return clone

    # -- cos / sin -----------------------------------------------------------------------
    def _inverse_frequencies(self, seq_len: int, device: torch.device) -> tuple[torch.Tensor, float]:
        """(inverse frequencies on ``device``, factor), made once per (device, length scale).

        Made on the device, so a forward pass copies nothing from the host.
        """
        if torch.compiler.is_compiling():  # traced into the graph (made on the device there); no Python cache
            return self.frequencies(seq_len, device)
        key = (device, seq_len)
        if key not in self._freqs:
            self._freqs[key] = self.frequencies(seq_len, device)
        return self._freqs[key]

    def length_key(self, pos, steps: torch.Tensor) -> int:
        """The sequence length :meth:`frequencies` is told: dynamic NTK scales with it (the data's stated bound,
        else the token count); 0 where the frequencies do not depend on it."""
        return (steps_end(pos) or steps.shape[-1]) if self.scaling.type == "dynamic" else 0

    def _cos_sin(self, steps: torch.Tensor, seq_len: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        inv_freq, factor = self._inverse_frequencies(seq_len, device)
        angles = rotation_angles(steps.to(device), inv_freq)
        return angles.cos() * factor, angles.sin() * factor

    def rotate(self, x, pos):
        steps = self.field(pos)
        seq_len = self.length_key(pos, steps)

        def rows(s: torch.Tensor):
            cos, sin = self._cos_sin(s, seq_len, x.device)
            if cos.dim() == 3:  # [B, L, R] -> [B, 1, L, R]
                cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
            return cos, sin

        cos, sin = self._rows.get(steps, rows, key=seq_len)
        return apply_cos_sin(x, cos, sin, self.layout)

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, base={self.base}, layout={self.layout}, "
            f"rot_dim={self.rot_dim}, scaling={self.scaling.type}x{self.scaling.factor}"
            + (f", frequency_fraction={self.frequency_fraction}" if self.frequency_fraction < 1.0 else "")
        )
