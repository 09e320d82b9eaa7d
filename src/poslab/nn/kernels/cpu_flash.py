"""Causal attention with an additive bias on the CPU, one block of query rows at a time.

SDPA can take a bias only as a float mask: on the CPU that is a full
``[B | 1, H, L, L]`` tensor, and differentiating it goes through the general
kernel, which saves the ``[B, H, L, L]`` attention of every layer. Here:

* forward: ATen's CPU flash kernel on each block of query rows, against the
  keys up to the block's last row (causal: the rest is skipped), with that
  block's bias built from the offsets' values (or sliced from a dense bias);
  it saves only the log-sum-exp.
* backward: the flash backward written out per row block for the whole batch
  (Dao et al. 2022, FlashAttention, Alg. 4): the probabilities P and
  dS = P ⊙ (dP − rowsum(dO ⊙ O)) are computed once and give dq, dk, dv and
  the bias gradient Σ_b dS_b, reduced onto the ``Lq + Lk − 1`` offsets for
  an offset-only bias.

Memory therefore grows with L·block, not L², for any offset-only bias.

Relies on ``torch.ops.aten._scaled_dot_product_flash_attention_for_cpu``, a
private op: :data:`AVAILABLE` is False where it is missing and attention then
falls back to SDPA. Tested with torch 2.4–2.14.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from poslab.encoders.offsets import toeplitz_rows

_FLASH = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
#: Whether the private ATen op this kernel relies on exists in this torch.
AVAILABLE = _FLASH is not None
#: Elements of one float32 temporary per block: the query rows per block follow from it
#: (measured with ``make bench``: 2^20–2^21 best at L = 1024).
BLOCK_ELEMENTS = 1 << 21
#: Up to this many ``[H, L, L]`` elements the bias is laid out whole, once per forward pass for every
#: layer: the forward is one kernel call and the backward reads views of it (``make bench``, L = 1024:
#: T5 1.47x ``none`` against 1.67x block by block; L = 2048: 1.72x against 1.91x). Past it (L = 4096 with
#: 4 heads), every block is built from the offsets and memory stays at ``none``'s.
FULL_MASK_ELEMENTS = 1 << 24
#: Probabilities below e^UNDERFLOW ≈ 1e−30 are taken as 0 in the backward. Left alone, float32 turns
#: them (and their products) into denormals, which the CPU computes ~10x slower: ALiBi's far keys made
#: the whole training step 4.9x ``none`` at L = 1024 (1.6x with this cut). The change to any gradient
#: is below 1e−30 per key.
UNDERFLOW = -69.0
_TINY = 2 * math.exp(UNDERFLOW)


class BiasBlocks:
    """The bias of one attention call, served one block of rows at a time.

    ``offsets``: values ``[H, Lq + Lk − 1]`` of an offset-only bias (smallest
    offset first), or ``dense``: ``[1 | B, H, Lq, Lk]``. Exactly one is given.
    """

    def __init__(self, length_q: int, offsets: torch.Tensor | None = None, dense: torch.Tensor | None = None):
        if (offsets is None) == (dense is None):
            raise ValueError("BiasBlocks needs exactly one of offsets or dense")
        self.length_q, self.offsets, self.dense = length_q, offsets, dense
        self._whole: torch.Tensor | None = None

    def whole(self, dtype: torch.dtype) -> torch.Tensor:
        """The whole ``[1 | B, H, Lq, Lq]`` bias in ``dtype``, laid out once for every layer that asks."""
        if self._whole is None or self._whole.dtype != dtype:
            self._whole = self.block(self.tensor, 0, self.length_q, self.length_q).to(dtype).contiguous()
        return self._whole

    @property
    def tensor(self) -> torch.Tensor:
        return self.offsets if self.offsets is not None else self.dense

    def block(self, values: torch.Tensor, start: int, stop: int, end: int) -> torch.Tensor:
        """Rows ``start:stop`` x keys ``0:end`` (``[1 | B, H, r, end]``) from ``values`` (:attr:`tensor`)."""
        if self._whole is not None and self._whole.dtype == values.dtype:  # already laid out: a view
            return self._whole[:, :, start:stop, :end]
        if self.offsets is not None:
            return toeplitz_rows(values, self.length_q, slice(start, stop), slice(0, end)).unsqueeze(0)
        return values[:, :, start:stop, :end]

    def grad_into(self, grad: torch.Tensor, block_grad: torch.Tensor, start: int, stop: int) -> None:
        """Add a block's gradient ``[B, H, r, end]`` to ``grad`` (shaped like :attr:`tensor`)."""
        if self.offsets is None:
            if grad.shape[0] == 1:
                grad[:, :, start:stop, : block_grad.shape[-1]] = block_grad.sum(0, keepdim=True)
            else:
                grad[:, :, start:stop, : block_grad.shape[-1]] = block_grad
            return
        # Sum along the block's diagonals: flipping the rows and padding each by the row count
        # makes row t start t places further right, so column c collects offset c − (r − 1) − start.
        per_head = block_grad.sum(0).flip(-2)  # [H, r, n]
        heads, rows, keys = per_head.shape
        skewed = F.pad(per_head, (0, rows)).flatten(-2)[:, : rows * (keys + rows - 1)]
        diagonals = skewed.view(heads, rows, keys + rows - 1).sum(1)
        first = self.length_q - stop  # value index of offset (0 − (stop − 1))
        grad[:, first : first + keys + rows - 1] += diagonals


def _rows_per_block(batch: int, heads: int, length: int) -> int:
    return max(1, BLOCK_ELEMENTS // (batch * heads * length))


def _masked_block(bias: torch.Tensor, start: int, stop: int, dtype: torch.dtype) -> torch.Tensor:
    """The bias block with −inf where a row would see a later key (only the diagonal part)."""
    block = bias.to(dtype, copy=True)
    future = torch.ones(stop - start, stop - start, dtype=torch.bool, device=block.device).triu(1)
    block[..., start:stop].masked_fill_(future, float("-inf"))
    return block


class _BlockedCausalBiasAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, values, blocks: BiasBlocks):
        batch, heads, length, dim = q.shape
        ctx.blocks = blocks
        if heads * length * length <= FULL_MASK_ELEMENTS:  # small enough to lay out once: one kernel call
            out, lse = _FLASH(q, k, v, 0.0, True, attn_mask=blocks.whole(q.dtype))
            ctx.save_for_backward(q, k, v, values, out, lse)
            return out
        out = torch.empty_like(q)
        lse = torch.empty(batch, heads, length, dtype=torch.float32, device=q.device)
        step = _rows_per_block(batch, heads, length)
        for start in range(0, length, step):
            stop = min(start + step, length)
            mask = _masked_block(blocks.block(values, start, stop, stop), start, stop, q.dtype)
            o, s = _FLASH(q[:, :, start:stop], k[:, :, :stop], v[:, :, :stop], 0.0, False, attn_mask=mask)
            out[:, :, start:stop] = o
            lse[:, :, start:stop] = s
        ctx.save_for_backward(q, k, v, values, out, lse)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, values, out, lse = ctx.saved_tensors
        blocks: BiasBlocks = ctx.blocks
        batch, heads, length, dim = q.shape
        scale = dim**-0.5
        delta = (grad_out.float() * out.float()).sum(-1, keepdim=True)  # [B, H, L, 1]
        # [B*H, L, Dh] float32, contiguous once: row blocks of these are matmul-ready without copies
        q2, k2, v2, g2 = (t.float().contiguous().view(batch * heads, length, dim) for t in (q, k, v, grad_out))
        dq, dk, dv = torch.empty_like(q2), torch.zeros_like(k2), torch.zeros_like(v2)
        need_bias_grad = ctx.needs_input_grad[3]
        dvalues = torch.zeros(values.shape, dtype=torch.float32, device=values.device) if need_bias_grad else None
        scaled_q = q2 * scale  # scaling the [L, Dh] queries saves a pass over the [L, L] scores
        values32 = values.float()
        step = _rows_per_block(batch, heads, length)
        for start in range(0, length, step):  # causal: rows start..stop see keys 0..stop only
            stop = min(start + step, length)
            rows, seen, count = slice(start, stop), slice(0, stop), stop - start
            probs = torch.bmm(scaled_q[:, rows], k2[:, seen].transpose(1, 2)).view(batch, heads, count, stop)
            probs = probs.add_(blocks.block(values32, start, stop, stop)).sub_(lse[:, :, rows, None])
            probs = F.threshold_(probs.clamp_(min=UNDERFLOW).exp_(), _TINY, 0.0)  # no denormals (UNDERFLOW)
            future = torch.ones(count, count, dtype=torch.bool, device=q.device).triu(1)
            probs[..., start:stop].masked_fill_(future, 0.0)  # only the diagonal part reaches the future
            grads = torch.bmm(g2[:, rows], v2[:, seen].transpose(1, 2)).view(batch, heads, count, stop)
            grads = grads.sub_(delta[:, :, rows]).mul_(probs)  # dS
            if dvalues is not None:
                blocks.grad_into(dvalues, grads, start, stop)
            probs, grads = probs.view(batch * heads, count, stop), grads.view(batch * heads, count, stop)
            torch.bmm(grads, k2[:, seen], out=dq[:, rows])  # dQ = dS K
            dk[:, seen].baddbmm_(grads.transpose(1, 2), q2[:, rows])  # dK = dSᵀ Q
            dv[:, seen].baddbmm_(probs.transpose(1, 2), g2[:, rows])  # dV = Pᵀ dO
        shape = (batch, heads, length, dim)
        return (
            dq.mul_(scale).view(shape).to(q.dtype),
            dk.mul_(scale).view(shape).to(k.dtype),
            dv.view(shape).to(v.dtype),
            None if dvalues is None else dvalues.to(values.dtype),
            None,
        )


def causal_bias_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, blocks: BiasBlocks) -> torch.Tensor:
    """Causal softmax(q·kᵀ/√Dh + bias)·v for ``[B, H, L, Dh]`` inputs on the CPU (``Lq = Lk``)."""
    return _BlockedCausalBiasAttention.apply(q, k, v, blocks.tensor, blocks)
