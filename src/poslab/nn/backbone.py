"""Pre-norm transformer that calls the encoder's three hooks.

The backbone owns the encoder (so its parameters train and checkpoint with
the model) but never names one: it calls ``encode_input`` on the positioned
tokens, ``attention_bias`` once per forward pass (shared by every layer,
broadcast over the batch) and ``rotate`` inside each attention layer. Each
layer asks ``encoder.for_layer(i)`` for the encoder of its attention hooks
(the same one unless the encoder is a per-layer hybrid), and a bias is made
once per distinct layer encoder.
Prefix tokens (a class token) carry no position: no embedding, no rotation,
zero bias.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from poslab.encoders.base import EXPLICIT_HOOKS, PositionEncoder
from poslab.nn.attention import AttentionBias, SelfAttention
from poslab.nn.decoding import DecodingCache, joined
from poslab.positions import Positions, steps_start
from poslab.positions.offsets import toeplitz_offsets


class TransformerBlock(nn.Module):
    """Pre-norm attention and MLP. ``drop_path``: stochastic depth (Huang et al. 2016), each residual branch
    skipped for a sample with that probability in training and scaled by 1 / (1 - p) otherwise (torchvision's
    ``StochasticDepth``, "row" mode: per sample, as DeiT and timm drop paths)."""

    def __init__(
        self, dim: int, num_heads: int, mlp_ratio: float = 4.0, dropout: float = 0.0, drop_path: float = 0.0
    ) -> None:
        super().__init__()
        hidden = int(dim * mlp_ratio)
        self.norm1 = nn.LayerNorm(dim)
        self.attn = SelfAttention(dim, num_heads)  # no dropout on attention probabilities (see SelfAttention)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(
            nn.Linear(dim, hidden), nn.GELU(), nn.Dropout(dropout), nn.Linear(hidden, dim), nn.Dropout(dropout)
        )
        self.attn_dropout = nn.Dropout(dropout)
        self.drop_path = nn.Identity()
        if drop_path:
            from torchvision.ops import StochasticDepth  # deferred: torchvision, ~4.6 s, only where paths drop

            self.drop_path = StochasticDepth(drop_path, "row")

    def residual_outputs(self) -> tuple[nn.Linear, nn.Linear]:
        """The two projections whose outputs are added to the residual stream (attention's and the MLP's)."""
        return self.attn.proj, self.mlp[3]

    def forward(self, x, encoder, pos, bias=None, num_prefix_tokens=0, causal=False, layer=0, cache=None):
        attended = self.attn(self.norm1(x), encoder, pos, bias, num_prefix_tokens, causal, layer, cache)
        x = x + self.drop_path(self.attn_dropout(attended))
        return x + self.drop_path(self.mlp(self.norm2(x)))


class Transformer(nn.Module):
    """A stack of pre-norm blocks with a final LayerNorm."""

    def __init__(
        self,
        encoder: PositionEncoder,
        *,
        dim: int,
        depth: int,
        num_heads: int,
        mlp_ratio: float = 4.0,
        dropout: float = 0.0,
        causal: bool = False,
        drop_path: float = 0.0,
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.causal = causal
        rates = [drop_path * i / max(1, depth - 1) for i in range(depth)]  # DeiT / timm: 0 ... drop_path, linear
        self.blocks = nn.ModuleList(TransformerBlock(dim, num_heads, mlp_ratio, dropout, rate) for rate in rates)
        self.norm = nn.LayerNorm(dim)
        #: recompute each block in the backward pass (``model.activation_checkpointing``); RNG state is replayed,
        #: so dropout draws the same masks and the gradients are those of the plain pass
        self.activation_checkpointing = False

    def forward(
        self,
        x: torch.Tensor,
        pos: Positions | torch.Tensor,
        num_prefix_tokens: int = 0,
        allowed: torch.Tensor | None = None,
        cache: DecodingCache | None = None,
    ) -> torch.Tensor:
        """``x [B, L, D]`` with the first ``num_prefix_tokens`` tokens unpositioned.

        ``allowed``: optional boolean ``[L, L]`` mask of which token may attend
        to which (a structure of the task, e.g. forecast queries see the past).
        ``cache``: decode incrementally (:mod:`poslab.nn.decoding`): ``x`` and ``pos`` are the tokens after
        the cached ones.
        """
        if cache is not None:
            if num_prefix_tokens or allowed is not None:
                raise ValueError("incremental decoding takes positioned tokens only, without a structure mask")
            return self.decode(x, pos, cache)
        p = num_prefix_tokens
        x = (
            torch.cat((x[:, :p], self.encoder.encode_input(x[:, p:], pos)), dim=1)
            if p
            else self.encoder.encode_input(x, pos)
        )
        made: list[tuple[PositionEncoder, AttentionBias | None]] = []  # one bias per distinct layer encoder
        for index, block in enumerate(self.blocks):
            encoder = self.encoder.for_layer(index)
            found = [bias for owner, bias in made if owner is encoder]
            if not found:
                mask = windowed(allowed, encoder.attention_window(), x.shape[1], p, self.causal, x.device)
                mask = blockwise(mask, encoder.attention_blocks(), x.shape[1], p, self.causal, x.device)
                found = [self.attention_bias(pos, p, x.dtype, x.device, mask, encoder)]
                made.append((encoder, found[0]))
            if self.activation_checkpointing and self.training and torch.is_grad_enabled():
                x = checkpoint(block, x, encoder, pos, found[0], p, self.causal, index, use_reentrant=False)
            else:
                x = block(x, encoder, pos, found[0], p, self.causal, index)
        return self.norm(x)

    def decode(self, x: torch.Tensor, pos: Positions, cache: DecodingCache) -> torch.Tensor:
        """One step of incremental decoding: ``x [B, n, D]`` at ``pos`` after the ``T − n`` cached tokens.

        The first step (nothing cached: a prompt) builds the bias as :meth:`forward` does; a later one the
        bias of its ``n`` rows against every key, except for an encoder that writes its logits out, which
        takes the whole prefix's (:mod:`poslab.nn.decoding`). With an encoder whose transform follows the
        length, every step computes the whole prefix again from the inputs the cache keeps."""
        new = x.shape[1]
        if self.length_dependent():  # the transform of every position changes with the length: the whole prefix
            if len(cache):
                x, pos = torch.cat((cache.embedded, x), dim=1), joined(cache.positions, pos)
                cache.clear()
                return self.decode(x, pos, cache)[:, -new:]
            cache.embedded = x
        everything = cache.advance(pos)
        total = len(cache)
        x = self.encoder.encode_input(x, pos)
        made: list[tuple[PositionEncoder, AttentionBias | None]] = []
        for index, block in enumerate(self.blocks):
            encoder = self.encoder.for_layer(index)
            found = [bias for owner, bias in made if owner is encoder]
            if not found:
                found = [self.step_bias(encoder, everything, pos, total, new, x.dtype, x.device)]
                made.append((encoder, found[0]))
            x = block(x, encoder, pos, found[0], 0, self.causal, index, cache.layers[index])
        return self.norm(x)

    def length_dependent(self) -> bool:
        """Whether any layer's encoder transforms a position by the sequence's length (dynamic NTK)."""
        layers = (self.encoder.for_layer(index) for index in range(len(self.blocks)))
        return self.encoder.length_dependent() or any(encoder.length_dependent() for encoder in layers)

    def step_bias(self, encoder, everything, pos, total, new, dtype, device) -> AttentionBias | None:
        """The bias of one decoding step's queries (all of them for a whole prefix) against every key."""
        window, block = encoder.attention_window(), encoder.attention_blocks()
        if total == new or any(encoder.uses(hook) for hook in EXPLICIT_HOOKS):
            mask = windowed(None, window, total, 0, self.causal, device)
            mask = blockwise(mask, block, total, 0, self.causal, device)
            return self.attention_bias(everything, 0, dtype, device, mask, encoder)
        allowed = causal_rows(total, new, device) if self.causal else None
        allowed = blockwise(windowed(allowed, window, total, 0, self.causal, device, new), block, total, 0,
                            self.causal, device, new)  # fmt: skip
        allowed = None if allowed is None or bool(allowed.all()) else allowed  # every key: no mask
        bias = encoder.attention_bias(pos, everything) if encoder.uses("attention_bias") else None
        if bias is None:
            return None if allowed is None else AttentionBias(allowed=allowed)
        bias = bias.to(device=device, dtype=dtype)
        return AttentionBias(dense=bias.unsqueeze(0) if bias.dim() == 3 else bias, allowed=allowed)

    def attention_bias(
        self, pos, num_prefix_tokens: int, dtype, device, allowed=None, encoder: PositionEncoder | None = None
    ) -> AttentionBias | None:
        """The encoder's bias (zero for prefix tokens), once per forward pass for all layers.

        An offset-only bias on consecutive positions stays as its ``2L − 1``
        values, or ``2R + 1`` for one flat beyond R (the kernels build it block
        by block); any other is laid out ``[1 | B, H, L, L]``.
        """
        allowed = None if allowed is None else allowed.to(device)
        encoder = encoder or self.encoder
        if encoder.uses("relative_bias") and not num_prefix_tokens and steps_start(pos) is not None:
            radius = encoder.field(pos).shape[-1] - 1
            flat_beyond = encoder.flat_beyond()
            radius = radius if flat_beyond is None else min(radius, flat_beyond)
            values = encoder.relative_bias(toeplitz_offsets(radius + 1, radius + 1, device=device))  # −R … R
            return AttentionBias(
                offsets=values.to(device=device, dtype=torch.float32), causal=self.causal, allowed=allowed
            )
        bias = encoder.attention_bias(pos, pos)
        if bias is None:
            return None if allowed is None else AttentionBias(causal=self.causal, allowed=allowed)
        bias = F.pad(bias.to(device=device, dtype=dtype), (num_prefix_tokens, 0, num_prefix_tokens, 0))
        if bias.dim() == 3:  # [H, L, L] -> [1, H, L, L]: broadcast over the batch (a 3D mask is slow in SDPA)
            bias = bias.unsqueeze(0)
        return AttentionBias(dense=bias, causal=self.causal, allowed=allowed)


def query_key_indices(length: int, new: int | None, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(the queries' indices ``[n, 1]``: the last ``new`` of ``length`` tokens, or all; every key's ``[1, L]``)."""
    keys = torch.arange(length, device=device)
    return keys[length - (new or length) :, None], keys[None, :]


def causal_rows(length: int, new: int | None, device) -> torch.Tensor:
    """The causal rule for the last ``new`` queries (or all): key j is visible to query i when j ≤ i."""
    queries, keys = query_key_indices(length, new, device)
    return keys <= queries


def windowed(
    allowed: torch.Tensor | None, window: int | None, length: int, prefix: int, causal: bool, device,
    new: int | None = None,
) -> torch.Tensor | None:  # fmt: skip
    """``allowed`` narrowed to a sliding window of ``window`` tokens: key j is visible to query i when
    i − W < j (with the causal mask: the W tokens up to i) or, bidirectional, |i − j| < W; the prefix
    tokens (a class token) stay global. None: no window. ``new``: the rows of the last ``new`` queries only
    (a decoding step), ``allowed`` then of their shape."""
    if window is None:
        return allowed
    queries, keys = query_key_indices(length, new, device)
    offset = queries - keys  # i − j
    band = offset < window if causal else offset.abs() < window
    if prefix:
        band[queries[:, 0] < prefix, :] = True
        band[:, :prefix] = True
    allowed = None if allowed is None else allowed.to(device)
    return band if allowed is None else allowed & band


def blockwise(
    allowed: torch.Tensor | None, block: int | None, length: int, prefix: int, causal: bool, device,
    new: int | None = None,
) -> torch.Tensor | None:  # fmt: skip
    """``allowed`` narrowed to blockwise attention with blocks of ``block`` tokens (Sun et al. 2022, §3.3): a
    query sees the keys of its own block and of the block before it (with the causal mask: up to itself;
    bidirectional: the blocks either side); the prefix tokens stay global. None: no blocks. ``new``: as
    :func:`windowed`."""
    if block is None:
        return allowed
    queries, keys = query_key_indices(length, new, device)
    apart = queries // block - keys // block  # query's block − key's block
    near = (apart >= 0) & (apart <= 1) if causal else apart.abs() <= 1
    if prefix:
        near[queries[:, 0] < prefix, :] = True
        near[:, :prefix] = True
    allowed = None if allowed is None else allowed.to(device)
    return near if allowed is None else allowed & near
