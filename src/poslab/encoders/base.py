"""The encoder protocol: three hook points, inherited as no-ops.

Every position encoder in the literature acts at one or more of three places
in a transformer (see docs/architecture.md):

* ``encode_input(x, pos)``  — add or mix position into token embeddings,
* ``rotate(x, pos)``        — rotate per-head queries / keys (RoPE family),
* ``attention_bias(q_pos, k_pos)`` — an additive ``[H, Lq, Lk]`` logits bias.

Two refinements for the encoders that need them, each costing nothing to the
others: ``rotate_query`` / ``rotate_key`` (default: ``rotate``) treat queries
and keys differently (xPos scales them in opposite directions), and
``content_bias(q, k, logits)`` adds a bias computed from the attention logits
themselves (CoPE counts gates over them), ``input_bias(x, layer)`` one computed
from the layer's input tokens (FoX's forget gates); only an encoder that
overrides one makes attention compute its logits explicitly instead of a fused
kernel.

A bias that depends only on the offset ``k − q`` (ALiBi, T5, Shaw) overrides
``relative_bias(offsets)`` instead: ``attention_bias`` is derived from it, and
the attention kernels build the bias block by block from its ``Lq + Lk − 1``
values (FlexAttention's ``score_mod`` on a GPU, a blocked kernel on the CPU),
so no ``L × L`` tensor is needed. One that is flat beyond some distance
(clipped: Shaw, T5) says so with ``flat_beyond()``, and the kernels take
only the values up to it.

The backbone calls the hooks and never names an encoder; an encoder overrides
the hooks it uses. ``pos`` is either a :class:`~poslab.positions.Positions`
(the encoder reads the field named by ``reads``) or a plain tensor taken to be
that field, so ``enc.encode_input(x, torch.arange(L))`` works in a notebook.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, ClassVar

import torch
from torch import nn

from poslab.errors import ConfigError
from poslab.positions import Positions, steps_start
from poslab.positions.offsets import offset_bias

if TYPE_CHECKING:  # the searched extension's budget and result, named by the protocol's signature only
    from poslab.encoders.longrope_search import SearchBudget, SearchResult

HOOKS = (
    "encode_input",
    "rotate",
    "attention_bias",
    "relative_bias",
    "content_bias",
    "input_bias",
    "attention_logits",
    "attention_weights",
)
#: Hooks that make attention write its logits out (no fused kernel computes them).
EXPLICIT_HOOKS = ("content_bias", "input_bias", "attention_logits", "attention_weights")
#: Hooks that replace a step of attention rather than add to it: at most one member of a composite has each.
REPLACING_HOOKS = ("attention_logits", "attention_weights")
#: What a searched extension is scored by at its length: ``loss``, the mean loss of held-out windows;
#: ``needle``, the loss of a needle's tokens asked for at the end of a window that states it at the start
#: (LongRoPE2's needle-driven perplexity).
SEARCH_OBJECTIVES = ("loss", "needle")
#: Overriding any of these is using the ``rotate`` hook.
ROTATE_HOOKS = ("rotate", "rotate_query", "rotate_key")


class PositionEncoder(nn.Module):
    """Base class: subclasses set the class variables and override hooks.

    Class variables (declared by each encoder, read by the registry and the
    config validation):

    * ``name`` — registered name (set by :func:`register_encoder`).
    * ``paper`` — the paper it implements, "Authors year".
    * ``reads`` — the :class:`Positions` field it reads, or None.
    * ``context_extensions`` — what :meth:`extended` supports at evaluation.
    * ``length_driven_extensions`` — those whose scale follows the length being
      processed (dynamic NTK): the length study applies them with factor 1 and
      as in generation, each prediction scaled for its own prefix.
    * ``searched_extensions`` — those whose settings are searched for each length
      on validation data before they are scored (LongRoPE's factors): the length
      study builds them with :meth:`search_extension`, not :meth:`extended`.
    """

    name: ClassVar[str] = ""
    #: The paper it implements, "Authors year" (the docs' encoder table), or "" for a common construction.
    paper: ClassVar[str] = ""
    reads: ClassVar[str | None] = None
    #: Context extensions :meth:`extended` accepts (RoPE: linear, ntk, dynamic, yarn).
    context_extensions: ClassVar[tuple[str, ...]] = ()
    #: Extensions driven by the current length rather than a factor (see the class docstring).
    length_driven_extensions: ClassVar[tuple[str, ...]] = ()
    #: Extensions whose settings are searched per length (see the class docstring).
    searched_extensions: ClassVar[tuple[str, ...]] = ()
    #: Its query / key transform acts on the prefix tokens (a class token) too: one that reads no position but
    #: what attention sees (SSMax counts every key a query attends to). Others leave the prefix as it is.
    sees_prefix: ClassVar[bool] = False
    #: What it needs from the modality's training besides the field it reads (``offers:`` in the modality's
    #: YAML): ``longer_rows``, rows longer than the context for a phase of training (LongRoPE2's).
    needs: ClassVar[tuple[str, ...]] = ()

    def __init__(self, dim: int, num_heads: int) -> None:
        super().__init__()
        if dim % num_heads:
            raise ConfigError(f"model.dim={dim} is not divisible by model.num_heads={num_heads}")
        self.dim = dim
        self.num_heads = num_heads
        self.head_dim = dim // num_heads

    # -- the three hooks -------------------------------------------------
    def encode_input(self, x: torch.Tensor, pos: Positions | torch.Tensor) -> torch.Tensor:
        """``[B, L, D] -> [B, L, D]``; default: unchanged."""
        return x

    def rotate(self, x: torch.Tensor, pos: Positions | torch.Tensor) -> torch.Tensor:
        """Per-head queries or keys ``[B, H, L, Dh]`` -> ``[B, H, L, Dh']``, ``Dh'`` the same for both (``Dh``
        but for an encoder that widens them, as PoPE's polar pairs); default: unchanged."""
        return x

    def rotate_query(self, x: torch.Tensor, pos: Positions | torch.Tensor) -> torch.Tensor:
        """What attention applies to queries; default: :meth:`rotate`."""
        return self.rotate(x, pos)

    def rotate_key(self, x: torch.Tensor, pos: Positions | torch.Tensor) -> torch.Tensor:
        """What attention applies to keys; default: :meth:`rotate`."""
        return self.rotate(x, pos)

    def rotate_tokens(self, hook: str, x: torch.Tensor, pos: Positions | torch.Tensor, prefix: int) -> torch.Tensor:
        """``hook`` (``rotate_query`` / ``rotate_key``) on queries or keys whose first ``prefix`` tokens hold no
        position (a class token): those stay as they are unless the encoder :attr:`sees_prefix`."""
        if not prefix or self.sees_prefix:
            return getattr(self, hook)(x, pos)
        return torch.cat((x[..., :prefix, :], getattr(self, hook)(x[..., prefix:, :], pos)), dim=-2)

    def attention_bias(self, q_pos: Positions | torch.Tensor, k_pos: Positions | torch.Tensor) -> torch.Tensor | None:
        """Additive logits bias ``[H, Lq, Lk]`` (or ``[B, H, Lq, Lk]``).

        Default: None, or the bias laid out from :meth:`relative_bias` when the
        encoder overrides that (Toeplitz from the offsets when the data says the
        positions are consecutive).
        """
        if not self.uses("relative_bias"):
            return None
        q, k = self.field(q_pos), self.field(k_pos)
        return offset_bias(self.relative_bias, q, k, steps_start(q_pos), steps_start(k_pos))

    def relative_bias(self, offsets: torch.Tensor) -> torch.Tensor | None:
        """Bias of each offset ``k − q`` (float ``offsets`` of any shape) -> ``[H, *offsets.shape]``.

        Only for biases that depend on the offset alone; default: None.
        """
        return None

    def flat_beyond(self) -> int | None:
        """A distance R with ``relative_bias(c) == relative_bias(clamp(c, −R, R))`` for every integer offset c
        (Shaw's clipping, T5's last bucket), or None (default).

        The backbone then passes attention the ``2R + 1`` values only, and the CPU kernel computes their
        gradient from the offsets within R: in a long sequence, most of its backward is ATen's own.
        """
        return None

    def content_bias(self, q: torch.Tensor, k: torch.Tensor, logits: torch.Tensor) -> torch.Tensor | None:
        """A bias from the attention's own content: ``q [B, H, Lq, Dh]``, ``k [B, H, Lk, Dh]`` (after rotation)
        and ``logits [B, H, Lq, Lk]`` (scaled, every other bias added, masked keys at −inf) -> an additive
        ``[B, H, Lq, Lk]``; default: None."""
        return None

    def input_bias(self, x: torch.Tensor, layer: int) -> torch.Tensor | None:
        """A logits bias from the tokens layer ``layer`` attends over: ``x [B, L, D]`` (its normed input) ->
        an additive ``[B, H, L, L]`` (FoX's forget gates); default: None. As ``content_bias``, only an
        encoder that overrides it makes attention write its logits out."""
        return None

    def attention_logits(self, q: torch.Tensor, k: torch.Tensor, x: torch.Tensor, layer: int) -> torch.Tensor | None:
        """The logits in place of ``q·k/√Dh``: ``q [B, H, Lq, Dh]``, ``k [B, H, Lk, Dh]`` (after rotation), ``x
        [B, L, D]`` the layer's normed input -> ``[B, H, Lq, Lk]`` before any bias or mask (PaTH); default:
        None, the dot product."""
        return None

    def attention_weights(self, logits: torch.Tensor) -> torch.Tensor | None:
        """The weights attention averages the values with, from its ``logits [B, H, Lq, Lk]`` (scaled, every
        bias added, masked keys at −inf; query i's own key is key i) -> ``[B, H, Lq, Lk]``; default: None,
        the softmax."""
        return None

    def for_layer(self, index: int) -> PositionEncoder:
        """The encoder whose attention hooks layer ``index`` uses; default: this one in every layer."""
        return self

    def attention_window(self) -> int | None:
        """W for sliding-window attention in the layers that use this encoder (a query sees the W tokens up
        to itself, or within W − 1 either side when bidirectional: Beltagy et al. 2020, Mistral 7B);
        default None: every key."""
        return None

    def attention_blocks(self) -> int | None:
        """B for blockwise attention in the layers that use this encoder (a query sees its own block of B
        tokens and the one before: Sun et al. 2022, §3.3); default None: every key."""
        return None

    def length_dependent(self) -> bool:
        """Whether the transform of a position depends on the sequence's length (dynamic NTK scales with it);
        default False. A decoding cache then computes the whole prefix at every step, as decoding without one
        does (:mod:`poslab.nn.decoding`)."""
        return False

    def train_progress(self, fraction: float) -> None:
        """Told before every training step the fraction of the run's optimiser steps done (0 … 1, from the
        trainer's step, so a resumed run tells the same); default: ignored. For encoders that change
        during training (DroPE drops its rotation for the last part)."""

    def learning_rate_factor(self, fraction: float) -> float | None:
        """The learning rate this encoder asks for at ``fraction`` of training, as a multiple of ``optim.lr``;
        default None: the run's schedule. For a phase with a schedule of its own (DroPE's recalibration)."""
        return None

    def complete_from(self) -> float:
        """The fraction of training from which the encoder is what evaluation will run (DroPE after its drop,
        LongRoPE2 after its search); before it, no checkpoint is a candidate for the best. Default 0."""
        return 0.0

    def training_multiples(self) -> tuple[int, ...]:
        """The lengths, in multiples of the training context, of the rows this encoder may train on
        (:meth:`training_multiple`); default (1,): the data's rows."""
        return (1,)

    def training_multiple(self, step: int) -> int:
        """Train optimiser step ``step`` on rows this many times the context (told after :meth:`train_progress`;
        the task draws them, about as many tokens a step); default 1. For an extension fine-tuned at its
        target length (LongRoPE2's mixed context windows)."""
        return 1

    def search_in_training(self) -> tuple[str, float] | None:
        """(searched extension, factor) to search on the model as trained so far, before this training step; the
        task runs it as the length study does and hands the result to :meth:`take_search`. Default None."""
        return None

    def take_search(self, result: SearchResult) -> None:
        """Keep what :meth:`search_in_training`'s search found."""
        raise NotImplementedError(f"encoder '{self.name}' searches nothing in training")

    def extended(self, kind: str, factor: float) -> PositionEncoder:
        """A copy that extends the context ``factor``-fold by ``kind``, for evaluation only."""
        raise NotImplementedError(f"encoder '{self.name}' has no context extension '{kind}'")

    def search_extension(
        self, kind: str, factor: float, fitness: Callable[..., float], budget: SearchBudget
    ) -> tuple[PositionEncoder, SearchResult]:
        """The copy extending the context ``factor``-fold by the searched extension ``kind`` whose settings
        minimise ``fitness(copy, objective)`` (the model with that copy in place, scored by ``objective``:
        :data:`SEARCH_OBJECTIVES`; the search names the one its method defines), and what the search found."""
        raise NotImplementedError(f"encoder '{self.name}' has no searched context extension '{kind}'")

    # -- helpers ------------------------------------------------------------
    @classmethod
    def hooks(cls) -> tuple[str, ...]:
        """The hooks this encoder uses (derived from what it overrides, never declared twice).

        ``relative_bias`` implies ``attention_bias``, which is derived from it.
        """
        overridden = {h for h in (*HOOKS, *ROTATE_HOOKS) if getattr(cls, h) is not getattr(PositionEncoder, h)}
        used = {"rotate" if h in ROTATE_HOOKS else h for h in overridden}
        if "relative_bias" in used:
            used.add("attention_bias")
        return tuple(h for h in HOOKS if h in used)

    @classmethod
    def uses(cls, hook: str) -> bool:
        return hook in cls.hooks()

    @classmethod
    def fits(cls, provided: Collection[str], offered: Collection[str] = ()) -> bool:
        """An encoder fits data that provides the field it reads (``none`` fits any) and a modality whose
        training offers what it :attr:`needs`."""
        return (cls.reads is None or cls.reads in provided) and set(cls.needs) <= set(offered)

    def field(self, pos: Positions | torch.Tensor) -> torch.Tensor:
        """The tensor this encoder reads from ``pos``."""
        if isinstance(pos, torch.Tensor):
            return pos
        value = getattr(pos, self.reads) if self.reads else None
        if value is None:
            raise ConfigError(
                f"encoder '{self.name}' reads positions.{self.reads}, but the data provides "
                f"only {', '.join(pos.available()) or 'none'}"
            )
        return value

    def extra_repr(self) -> str:
        return f"dim={self.dim}, num_heads={self.num_heads}"
