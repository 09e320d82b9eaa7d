"""Multi-head self-attention through ``scaled_dot_product_attention``.

Position enters at two points here: ``rotate`` on queries and keys (RoPE
family) and an additive logits bias (ALiBi, T5, …) that the backbone computes
once per forward pass for all layers (:class:`AttentionBias`). The
``q·k/√Dh`` scale is applied first; biases are added after it. Which kernel
runs is decided in :func:`attend`; the kernels live in :mod:`poslab.nn.kernels`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from poslab.encoders.base import EXPLICIT_HOOKS, PositionEncoder
from poslab.nn.decoding import LayerCache
from poslab.nn.kernels import cpu_flash, flex
from poslab.nn.precision import full_precision
from poslab.positions import Positions
from poslab.positions.offsets import expand_offsets, toeplitz_rows


class AttentionBias:
    """One forward pass's attention bias, shared by every layer.

    Exactly one form of the additive bias, or none:

    * ``offsets`` — ``[H, 2R + 1]`` values of an offset-only bias on
      consecutive positions (ALiBi, T5, Shaw in the usual case) at the offsets
      ``−R … R``; offsets beyond ±R take the edge values (``R = L − 1``, or
      less for a bias flat beyond R; a larger R is read where it is needed):
      the kernels build it block by block, so it costs no ``L × L`` tensor;
    * ``dense`` — ``[1 | B, H, Lq, Lk]`` (any other bias).

    ``allowed``: a boolean ``[Lq, Lk]`` structure mask (True = may attend), e.g.
    forecast queries that see only the past; ``causal``: the causal flag.
    ``masked()`` — everything folded into one mask for SDPA — is built once, on
    first use, and only where no blocked kernel applies.
    """

    def __init__(
        self,
        *,
        offsets: torch.Tensor | None = None,
        dense: torch.Tensor | None = None,
        causal: bool = False,
        allowed: torch.Tensor | None = None,
    ) -> None:
        if offsets is not None and dense is not None:
            raise ValueError("AttentionBias takes offsets or dense, not both")
        self.offsets = offsets
        # contiguous once here, not once per layer inside a kernel (measured: a [1, H, L, L] copy per layer)
        self.dense = None if dense is None else dense.contiguous()
        self.causal, self.allowed = causal, allowed
        self._masked: torch.Tensor | None = None
        self._blocks: cpu_flash.BiasBlocks | None = None
        self._score_mod = self._block_mask = None  # FlexAttention's, made once for every layer

    @property
    def additive(self) -> bool:
        return self.offsets is not None or self.dense is not None

    def offset_values(self, length_q: int, length_k: int) -> torch.Tensor:
        """``[H, Lq + Lk − 1]``: the value of each offset ``−(Lq − 1) … Lk − 1`` (differentiable)."""
        return expand_offsets(self.offsets, length_q, length_k)

    def full(self, length_q: int, length_k: int) -> torch.Tensor | None:
        """The additive bias as a ``[1 | B, H, Lq, Lk]`` tensor (materialises offsets)."""
        if self.offsets is not None:
            values = self.offset_values(length_q, length_k)
            return toeplitz_rows(values, length_q, slice(0, length_q), slice(0, length_k)).unsqueeze(0)
        return self.dense

    def masked(self, length_q: int, length_k: int, device: torch.device) -> torch.Tensor | None:
        """Bias, causal rule and structure mask as one SDPA mask: float with −inf, or boolean without a bias."""
        if self._masked is None:
            blocked = None if self.allowed is None else ~self.allowed
            if self.causal:
                future = torch.ones(length_q, length_k, dtype=torch.bool, device=device).triu(1)
                blocked = future if blocked is None else blocked | future
            bias = self.full(length_q, length_k)
            if bias is None:  # a structure mask alone stays boolean (SDPA's cheaper form)
                self._masked = None if blocked is None else ~blocked
            else:
                self._masked = bias if blocked is None else bias.masked_fill(blocked, float("-inf"))
        return self._masked

    def blocks(self, length_q: int) -> cpu_flash.BiasBlocks:
        """The CPU kernel's view of the bias, made once for every layer (it caches what it lays out)."""
        if self._blocks is None:
            self._blocks = cpu_flash.BiasBlocks(length_q, offsets=self.offsets, dense=self.dense)
        return self._blocks

    def score_mod(self, length_q: int):
        """FlexAttention's ``score_mod`` for this bias, made once for every layer."""
        if self._score_mod is None:
            if self.offsets is not None:
                self._score_mod = flex.offset_score_mod(self.offset_values(length_q, length_q), length_q)
            else:
                self._score_mod = flex.dense_score_mod(self.dense)
        return self._score_mod

    def block_mask(self, length_q: int, length_k: int, device: torch.device):
        """FlexAttention's ``BlockMask``: the structure mask's, made once for every layer, or the cached causal one."""
        if self.allowed is not None:
            if self._block_mask is None:
                self._block_mask = flex.allowed_block_mask(self.allowed, self.causal)
            return self._block_mask
        if self.causal:
            return flex.causal_block_mask(length_q, length_k, str(device))
        return None


def attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: AttentionBias | None, causal: bool, dropout: float
) -> torch.Tensor:
    """Attention with the cheapest correct kernel for this bias.

    * no bias: SDPA (flash kernels, ``is_causal``);
    * an additive bias on CUDA: FlexAttention, the bias read per score from its
      offsets or its dense form (:mod:`poslab.nn.kernels.flex`), where the head dim
      suits it and an offset bias is read for ``Lq = Lk``;
    * an additive bias with causal attention on the CPU: ATen's flash kernel one
      block of rows at a time, with the bias gradient in its backward
      (:mod:`poslab.nn.kernels.cpu_flash`);
    * everything else (dropout, a structure mask on the CPU, float64, a torch
      without those kernels): SDPA with the bias folded into a float mask.
    """
    kernel = kernel_for(q, k, bias, causal, dropout)
    if kernel == "sdpa":
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=causal)
    length_q, length_k = q.shape[-2], k.shape[-2]
    if kernel == "flex":
        score_mod = bias.score_mod(length_q)
        return flex.flex_bias_attention(q, k, v, score_mod, bias.block_mask(length_q, length_k, q.device))
    if kernel == "cpu_flash":
        return cpu_flash.causal_bias_attention(q, k, v, bias.blocks(length_q))
    mask = bias.masked(length_q, length_k, q.device)
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=causal)
    mask = mask if mask.dtype == torch.bool else mask.to(q.dtype)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)


def kernel_for(q, k, bias: AttentionBias | None, causal: bool, dropout: float) -> str:
    """Which kernel :func:`attend` takes: ``sdpa`` (no bias), ``flex``, ``cpu_flash`` or ``sdpa_mask`` (the
    bias folded into SDPA's mask). Reads only the inputs' device, dtype and shape."""
    if bias is None:
        return "sdpa"
    if not (bias.additive and dropout == 0.0):
        return "sdpa_mask"
    square = q.shape[-2] == k.shape[-2]  # an offset bias is read for Lq = Lk (self-attention)
    if q.device.type == "cuda" and flex.AVAILABLE and _flex_head_dim(q.shape[-1]) and (square or bias.offsets is None):
        return "flex"
    if (
        q.device.type == "cpu"
        and q.dtype in cpu_flash.DTYPES
        and causal
        and bias.allowed is None
        and square
        and cpu_flash.AVAILABLE
        and not torch.compiler.is_compiling()
    ):
        return "cpu_flash"
    return "sdpa_mask"


def _flex_head_dim(head_dim: int) -> bool:
    """FlexAttention's fused kernels take power-of-two head dims of at least 16."""
    return head_dim >= 16 and head_dim & (head_dim - 1) == 0


class SelfAttention(nn.Module):
    """``dropout`` applies to the attention probabilities; the backbone leaves it at 0
    (small models regularise the residual branches instead, and dropout on the
    probabilities forces SDPA off its flash kernel: measured 5.5 s vs 0.1 s a
    step at 384 tokens on the CPU)."""

    def __init__(self, dim: int, num_heads: int, dropout: float = 0.0, qkv_bias: bool = True) -> None:
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"dim {dim} is not divisible by num_heads {num_heads}")
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        self.dropout = dropout

    def forward(
        self,
        x: torch.Tensor,
        encoder: PositionEncoder,
        pos: Positions | torch.Tensor,
        bias: AttentionBias | None = None,
        num_prefix_tokens: int = 0,
        causal: bool = False,
        layer: int = 0,
        cache: LayerCache | None = None,
    ) -> torch.Tensor:
        """``x [B, L, D]``; ``bias`` from :meth:`Transformer.attention_bias`; ``layer``: this block's index;
        ``cache``: this layer's, when decoding incrementally (``x``: the tokens after the cached ones)."""
        batch, length, dim = x.shape
        q, k, v = self.qkv(x).view(batch, length, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        if cache is not None:
            out = decoding_step(q, k, v, x, encoder, bias, causal, layer, cache)
            return self.proj(out.transpose(1, 2).reshape(batch, length, dim))
        q = encoder.rotate_tokens("rotate_query", q, pos, num_prefix_tokens)
        k = encoder.rotate_tokens("rotate_key", k, pos, num_prefix_tokens)
        dropout = self.dropout if self.training else 0.0
        if any(encoder.uses(hook) for hook in EXPLICIT_HOOKS):
            out = attend_with_content(q, k, v, bias, causal, dropout, ExplicitHooks.of(encoder, x, layer))
        else:
            out = attend(q, k, v, bias, causal, dropout)
        return self.proj(out.transpose(1, 2).reshape(batch, length, dim))


def decoding_step(q, k, v, x, encoder: PositionEncoder, bias, causal: bool, layer: int, cache: LayerCache):
    """Attention of ``n`` new queries over the cached keys and their own (:mod:`poslab.nn.decoding`)."""
    explicit = any(encoder.uses(hook) for hook in EXPLICIT_HOOKS)
    keys, values, inputs = cache.append(k, v, x if explicit else None)
    total, new = keys.shape[-2], q.shape[-2]
    everything = cache.positions
    q = encoder.rotate_query(F.pad(q, (0, 0, total - new, 0)), everything)  # each query in its own row
    k = encoder.rotate_key(keys, everything)
    if explicit:
        hooks = ExplicitHooks.of(encoder, inputs, layer)
        return attend_with_content(q, k, values, bias, causal, 0.0, hooks)[..., total - new :, :]
    return attend(q[..., total - new :, :], k, values, bias, causal and total == new, 0.0)


class ExplicitHooks:
    """What one layer's encoder computes on written-out logits, each None where it computes nothing:
    ``logits(q, k)`` in place of the dot product (PaTH), ``bias(q, k, logits)`` added to them (CoPE's
    content bias, FoX's bias from the layer input), ``weights(logits)`` in place of the softmax
    (stick-breaking)."""

    def __init__(self, *, logits=None, bias=None, weights=None) -> None:
        self.logits, self.bias, self.weights = logits, bias, weights

    @classmethod
    def of(cls, encoder: PositionEncoder, x: torch.Tensor, layer: int) -> ExplicitHooks:
        """The hooks ``encoder`` overrides, for layer ``layer`` whose normed input is ``x``."""
        content = encoder.content_bias if encoder.uses("content_bias") else None
        from_input = encoder.input_bias(x, layer) if encoder.uses("input_bias") else None
        if from_input is not None and encoder.uses("attention_logits"):  # beside replaced logits it joins them
            from_input = from_input / math.sqrt(encoder.head_dim)  # before the 1/√d (docs/architecture.md)

        def bias(q, k, logits):
            extra = None if content is None else content(q, k, logits)
            if from_input is None:
                return extra
            return from_input if extra is None else extra + from_input

        return cls(
            logits=(lambda q, k: encoder.attention_logits(q, k, x, layer))
            if encoder.uses("attention_logits")
            else None,
            bias=bias if content is not None or from_input is not None else None,
            weights=encoder.attention_weights if encoder.uses("attention_weights") else None,
        )


def attend_with_content(q, k, v, bias: AttentionBias | None, causal: bool, dropout: float, hooks):
    """Attention with the logits written out, for an encoder that computes on them (``hooks``: an
    :class:`ExplicitHooks`, or a plain content-bias callable).

    The logits are ``q·k/√Dh`` (or the encoder's own) plus every other bias, masked keys at −inf, as the
    encoder's ``content_bias`` expects them; its bias is added before the softmax (or the encoder's own
    weights). Only encoders with such a hook take this path: it holds the ``[B, H, L, L]`` logits that
    the fused kernels avoid. In float32 under mixed precision too, as the fused kernels keep their scores
    (autocast would run these matmuls in bf16).
    """
    if not isinstance(hooks, ExplicitHooks):
        hooks = ExplicitHooks(bias=hooks)
    with full_precision(q.device):
        return _attend_with_content(q, k, v, bias, causal, dropout, hooks)


def _attend_with_content(q, k, v, bias: AttentionBias | None, causal: bool, dropout: float, hooks: ExplicitHooks):
    length_q, length_k = q.shape[-2], k.shape[-2]
    own = None if hooks.logits is None else hooks.logits(q, k)
    logits = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1]) if own is None else own.float()
    mask = None if bias is None else bias.masked(length_q, length_k, q.device)
    if mask is None and causal:
        mask = torch.ones(length_q, length_k, dtype=torch.bool, device=q.device).tril()
    if mask is not None:
        logits = logits.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else logits + mask.float()
    extra = None if hooks.bias is None else hooks.bias(q, k, logits)
    if extra is not None:
        logits = logits + extra.float()
    weights = None if hooks.weights is None else hooks.weights(logits)
    probs = logits.softmax(dim=-1) if weights is None else weights.float()
    probs = F.dropout(probs, p=dropout)
    return (probs @ v.float()).to(v.dtype)
