"""Multi-head self-attention through ``scaled_dot_product_attention``.

Position enters at two points here: ``rotate`` on queries and keys (RoPE
family) and an additive logits bias (ALiBi, T5, …) that the backbone computes
once per forward pass for all layers (:class:`AttentionBias`). The
``q·k/√Dh`` scale is SDPA's; biases are added after it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from poslab.encoders.base import PositionEncoder
from poslab.positions import Positions

_CPU_FLASH = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
#: Elements of one float32 temporary in the learned-bias backward: the query rows per block follow from it.
_BIAS_GRAD_ELEMENTS = 1 << 21


class _CausalFlashWithLearnedBias(torch.autograd.Function):
    """CPU flash attention (causal, additive bias) whose backward also returns the bias gradient.

    SDPA can only differentiate a float mask through its general kernel, which
    materialises and saves the ``[B, H, L, L]`` attention of every layer. Here
    the forward is the flash kernel (it saves only the log-sum-exp); the
    backward is the flash backward written out one block of query rows at a
    time (the whole batch at once), so the probabilities P and dS = P ⊙ (dP −
    rowsum(dO ⊙ O)) that the q/k/v gradients need are computed once and also
    give the bias gradient Σ_b dS_b (Dao et al. 2022, FlashAttention, Alg. 4).
    Keys above the diagonal are skipped. Measured with ``make bench`` at
    L = 1024: 1.2× the step time of ``none``, where calling ATen's flash
    backward and recomputing P and dP for the bias next to it gave 1.5×.
    """

    @staticmethod
    def forward(ctx, q, k, v, bias):
        out, lse = _CPU_FLASH(q, k, v, 0.0, True, attn_mask=bias)
        ctx.save_for_backward(q, k, v, bias, out, lse)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, bias, out, lse = ctx.saved_tensors
        batch, heads, length, dim = q.shape
        scale = dim**-0.5
        delta = (grad_out.float() * out.float()).sum(-1, keepdim=True)  # [B, H, L, 1]
        # [B*H, L, Dh] float32, contiguous once: row blocks of these are matmul-ready without copies
        q2, k2, v2, g2 = (t.float().contiguous().view(batch * heads, length, dim) for t in (q, k, v, grad_out))
        dq, dk, dv = torch.empty_like(q2), torch.zeros_like(k2), torch.zeros_like(v2)
        shared = bias.shape[0] == 1  # one bias broadcast over the batch: its gradient sums the batch
        dbias = torch.empty(bias.shape, dtype=torch.float32, device=bias.device)  # each entry written once below
        scaled_q = q2 * scale  # scaling the [L, Dh] queries saves a pass over the [L, L] scores
        block = max(1, _BIAS_GRAD_ELEMENTS // (batch * heads * length))
        for start in range(0, length, block):  # causal: rows start..end see keys 0..end only
            end = min(start + block, length)
            rows, seen = slice(start, end), slice(0, end)
            probs = torch.bmm(scaled_q[:, rows], k2[:, seen].transpose(1, 2)).view(batch, heads, end - start, end)
            probs = probs.add_(bias[:, :, rows, seen]).sub_(lse[:, :, rows, None]).exp_()
            future = torch.ones(end - start, end - start, dtype=torch.bool, device=q.device).triu(1)
            probs[..., start:end].masked_fill_(future, 0.0)  # only the diagonal part reaches the future
            grads = torch.bmm(g2[:, rows], v2[:, seen].transpose(1, 2)).view(batch, heads, end - start, end)
            grads = grads.sub_(delta[:, :, rows]).mul_(probs)  # dS
            dbias[:, :, rows, seen] = grads.sum(0, keepdim=True) if shared else grads
            dbias[:, :, rows, end:] = 0.0  # the future: no gradient
            probs, grads = probs.view(batch * heads, end - start, end), grads.view(batch * heads, end - start, end)
            torch.bmm(grads, k2[:, seen], out=dq[:, rows])  # dQ = dS K
            dk[:, seen].baddbmm_(grads.transpose(1, 2), q2[:, rows])  # dK = dSᵀ Q
            dv[:, seen].baddbmm_(probs.transpose(1, 2), g2[:, rows])  # dV = Pᵀ dO
        shape = (batch, heads, length, dim)
        return (
            dq.mul_(scale).view(shape).to(q.dtype),
            dk.mul_(scale).view(shape).to(k.dtype),
            dv.view(shape).to(v.dtype),
            dbias.to(bias.dtype),
        )


class AttentionBias:
    """One forward pass's attention bias, shared by every layer.

    ``bias``: the encoder's additive bias ``[1 | B, H, L, L]`` or None;
    ``allowed``: a boolean ``[L, L]`` structure mask (True = may attend), e.g.
    forecast queries that see only the past; ``causal``: the causal flag.
    ``masked()`` — everything folded into one float mask — is built once, on
    first use, for the kernels that need it.
    """

    def __init__(self, bias: torch.Tensor | None, causal: bool, allowed: torch.Tensor | None = None) -> None:
        # contiguous once here, not once per layer inside the flash kernel (measured: a [1, H, L, L] copy per layer)
        self.bias = None if bias is None else bias.contiguous()
        self.causal, self.allowed = causal, allowed
        self._masked: torch.Tensor | None = None

    def masked(self) -> torch.Tensor:
        if self._masked is None:
            if self.bias is None:  # a structure mask alone stays boolean (SDPA's cheaper form)
                self._masked = self.allowed
                return self._masked
            blocked = None if self.allowed is None else ~self.allowed
            if self.causal:
                length_q, length_k = self.bias.shape[-2:]
                future = torch.ones(length_q, length_k, dtype=torch.bool, device=self.bias.device).triu(1)
                blocked = future if blocked is None else blocked | future
            self._masked = self.bias if blocked is None else self.bias.masked_fill(blocked, float("-inf"))
        return self._masked


def attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: AttentionBias | None, causal: bool, dropout: float
) -> torch.Tensor:
    """SDPA with the cheapest correct kernel for this bias.

    Causal attention with a bias on the CPU goes to the CPU flash kernel with
    ``is_causal=True`` *and* the additive bias: it skips the future blocks
    instead of adding ``-inf`` to them (same values; measured ≈ 1.4× faster at
    L = 1024 than SDPA with a float mask). A learned bias (T5, Shaw) gets its
    gradient from :class:`_CausalFlashWithLearnedBias` instead of SDPA's general
    kernel (measured in ``make bench``). Elsewhere (GPU, bidirectional,
    dropout): SDPA with the bias as a float mask.
    """
    if bias is None:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=causal)
    if (
        bias.bias is not None
        and bias.allowed is None
        and (
            causal
            and _CPU_FLASH is not None
            and q.device.type == "cpu"
            and dropout == 0.0
            and q.shape[-2] == k.shape[-2]
        )
    ):
        mask = bias.bias.to(q.dtype)
        if mask.requires_grad:
            return _CausalFlashWithLearnedBias.apply(q, k, v, mask)
        return _CPU_FLASH(q, k, v, 0.0, True, attn_mask=mask)[0]
    mask = bias.masked()
    mask = mask if mask.dtype == torch.bool else mask.to(q.dtype)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)


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
    ) -> torch.Tensor:
        """``x [B, L, D]``; ``bias`` from :meth:`Transformer.attention_bias`."""
        batch, length, dim = x.shape
        q, k, v = self.qkv(x).view(batch, length, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q = _rotate_tokens(encoder, q, pos, num_prefix_tokens)
        k = _rotate_tokens(encoder, k, pos, num_prefix_tokens)
        out = attend(q, k, v, bias, causal, self.dropout if self.training else 0.0)
        return self.proj(out.transpose(1, 2).reshape(batch, length, dim))


def _rotate_tokens(
    encoder: PositionEncoder, x: torch.Tensor, pos: Positions | torch.Tensor, num_prefix_tokens: int
) -> torch.Tensor:
    """Rotate the positioned tokens; prefix tokens (class token) stay unrotated."""
    if not num_prefix_tokens:
        return encoder.rotate(x, pos)
    prefix, rest = x[..., :num_prefix_tokens, :], x[..., num_prefix_tokens:, :]
    return torch.cat((prefix, encoder.rotate(rest, pos)), dim=-2)
