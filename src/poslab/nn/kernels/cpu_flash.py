"""Causal attention with an additive bias on the CPU, one block of query rows at a time.

SDPA can take a bias only as a float mask: on the CPU that is a full
``[B | 1, H, L, L]`` tensor, and differentiating it goes through the general
kernel, which saves the ``[B, H, L, L]`` attention of every layer. Here:

* forward: ATen's CPU flash kernel on each block of query rows, against the
  keys up to the block's last row (causal: the rest is skipped), with that
  block's bias built from the offsets' values (or sliced from a dense bias);
  it saves only the log-sum-exp.
* backward of a bias that needs no gradient (ALiBi's fixed slopes): ATen's
  CPU flash backward, given the same bias and the causal flag (whole), or
  one block of rows at a time, adding up the blocks' key and value gradients.
* backward of a learned bias flat beyond an offset R well inside the
  sequence (T5, Shaw): ATen's backward as above for dq, dk, dv, and the bias
  gradient from the band of offsets within R only (:func:`_flat_bias_grad`).
* backward of any other learned bias (KERPLE, FIRE): the flash backward
  written out per row block for the whole batch (Dao et al. 2022,
  FlashAttention, Alg. 4): the probabilities P and dS = P ⊙ (dP − rowsum(dO ⊙ O))
  are computed once and give dq, dk, dv and the bias gradient Σ_b dS_b,
  reduced onto the offsets for an offset-only bias.

Memory therefore grows with L·block, not L², for any offset-only bias.

Relies on ``torch.ops.aten._scaled_dot_product_flash_attention_for_cpu`` and
its ``_backward``, private ops: :data:`AVAILABLE` is False where one is
missing or takes no mask, and attention then falls back to SDPA. Tested with
torch 2.14 (the pinned version).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from poslab import denormals
from poslab.encoders.offsets import clamped_offsets, offset_radius, toeplitz_rows

_FLASH = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
_FLASH_BACKWARD = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu_backward", None)


def _takes_a_mask(op) -> bool:
    return op is not None and "attn_mask" in str(op.default._schema)


#: Whether the private ATen ops this kernel relies on exist in this torch and take a mask.
AVAILABLE = _takes_a_mask(_FLASH) and _takes_a_mask(_FLASH_BACKWARD)
#: Elements of one float32 temporary per block: the query rows per block follow from it
#: (measured with ``make bench``: 2^20–2^21 best at L = 1024).
BLOCK_ELEMENTS = 1 << 21
#: Up to this many ``[H, L, L]`` elements the bias is laid out whole, once per forward pass for every
#: layer: the forward is one kernel call and the backward reads views of it (``make bench``, L = 1024:
#: T5 1.47x ``none`` against 1.67x block by block; L = 2048: 1.72x against 1.91x). Past it (L = 4096 with
#: 4 heads), every block is built from the offsets and memory stays at ``none``'s.
FULL_MASK_ELEMENTS = 1 << 24
#: Query rows per block of a flat bias's band gradient (:func:`_flat_bias_grad`), at most: its scores are
#: ``[B, H, rows, rows + R − 1]``, kept within :data:`BLOCK_ELEMENTS` (one layer's backward, L = 1024,
#: batch 4 x 4 heads: 32–64 rows best for R = 32 and R = 128).
BAND_ROWS = 64
#: Unless the process flushes denormals (:mod:`poslab.denormals`, as the ``poslab`` command does),
#: probabilities below e^UNDERFLOW ≈ 1e−30 are taken as 0 in the backward. Left alone, float32 turns
#: them (and their products) into denormals, which the CPU computes ~10x slower: ALiBi's far keys made
#: the whole training step 4.9x ``none`` at L = 1024 (1.6x with this cut). The change to any gradient
#: is below 1e−30 per key.
UNDERFLOW = -69.0
_TINY = 2 * math.exp(UNDERFLOW)


class BiasBlocks:
    """The bias of one attention call, served one block of rows at a time.

    ``offsets``: values ``[H, 2R + 1]`` of an offset-only bias at the offsets
    ``−R … R``, offsets beyond ±R taking the edge values (R < L − 1 for a bias
    flat beyond R), or ``dense``: ``[1 | B, H, Lq, Lq]``. Exactly one is given.
    """

    def __init__(self, length_q: int, offsets: torch.Tensor | None = None, dense: torch.Tensor | None = None):
        if (offsets is None) == (dense is None):
            raise ValueError("BiasBlocks needs exactly one of offsets or dense")
        self.length_q, self.offsets, self.dense = length_q, offsets, dense
        self.radius = None if offsets is None else offset_radius(offsets)
        self._sources: dict[torch.dtype, torch.Tensor] = {}
        self._whole: torch.Tensor | None = None

    @property
    def batch(self) -> int:
        """The bias's own batch size: 1 for offsets or a bias shared by the batch."""
        return 1 if self.dense is None else self.dense.shape[0]

    @property
    def tensor(self) -> torch.Tensor:
        """What the bias is made of, as given: its gradient is the one the kernel returns."""
        return self.offsets if self.offsets is not None else self.dense

    @property
    def flat(self) -> bool:
        """Whether the offsets stop at R < L − 1 (every farther offset takes an edge value)."""
        return self.radius is not None and self.radius < self.length_q - 1

    def _source(self, dtype: torch.dtype) -> torch.Tensor:
        """The ``[H, 2L − 1]`` value of every offset (or the dense bias) in ``dtype``, made once."""
        if dtype not in self._sources:
            if self.offsets is None:
                source = self.dense
            else:
                index = clamped_offsets(self.radius, self.length_q, self.length_q, self.offsets.device)
                source = self.offsets if self.radius == self.length_q - 1 else self.offsets[:, index]
            self._sources[dtype] = source.to(dtype)
        return self._sources[dtype]

    def whole(self, dtype: torch.dtype) -> torch.Tensor:
        """The whole ``[1 | B, H, Lq, Lq]`` bias in ``dtype``, laid out once for every layer that asks."""
        if self._whole is None or self._whole.dtype != dtype:
            self._whole = self.block(0, self.length_q, self.length_q, dtype).contiguous()
        return self._whole

    def block(self, start: int, stop: int, end: int, dtype: torch.dtype) -> torch.Tensor:
        """Rows ``start:stop`` x keys ``0:end`` (``[1 | B, H, r, end]``) in ``dtype``: a view where the bias is
        laid out (whole or dense), else a new tensor built from the offsets."""
        if self._whole is not None and self._whole.dtype == dtype:
            return self._whole[:, :, start:stop, :end]
        values = self._source(dtype)
        if self.offsets is not None:
            return toeplitz_rows(values, self.length_q, slice(start, stop), slice(0, end)).unsqueeze(0)
        return values[:, :, start:stop, :end]

    def masked_block(self, start: int, stop: int, dtype: torch.dtype) -> torch.Tensor:
        """Rows ``start:stop`` against keys ``0:stop`` with −inf where a row would see a later key (only the
        diagonal part), as a new tensor: one copy (a block built from the offsets already is one)."""
        built = self.offsets is not None and (self._whole is None or self._whole.dtype != dtype)
        block = self.block(start, stop, stop, dtype)
        block = block if built else block.clone()
        future = torch.ones(stop - start, stop - start, dtype=torch.bool, device=block.device).triu(1)
        block[..., start:stop].masked_fill_(future, float("-inf"))
        return block

    def grad_into(self, grad: torch.Tensor, block_grad: torch.Tensor, start: int, stop: int) -> None:
        """Add a block's gradient ``[B, H, r, end]`` to ``grad``: shaped like :attr:`tensor`, or for offsets
        ``[H, 2L − 1]``, one entry per offset (:meth:`fold` then sums what shares an edge value)."""
        if self.offsets is None:
            if grad.shape[0] == 1:
                grad[:, :, start:stop, : block_grad.shape[-1]] = block_grad.sum(0, keepdim=True)
            else:
                grad[:, :, start:stop, : block_grad.shape[-1]] = block_grad
            return
        # Sum along the block's diagonals: written with a row stride one less than the buffer's width,
        # row t starts t places further left, so buffer column rows + c − t collects offset c − t − start.
        heads, rows, keys = block_grad.shape[1:]
        width = keys + rows + 1
        skewed = torch.zeros(heads, rows * width, dtype=grad.dtype, device=grad.device)
        skewed.as_strided((heads, rows, keys), (rows * width, width - 1, 1), rows).copy_(block_grad.sum(0))
        diagonals = skewed.view(heads, rows, width).sum(1)[:, 1 : keys + rows]  # offsets −(rows−1) .. keys−1
        first = self.length_q - stop  # value index of offset (0 − (stop − 1))
        grad[:, first : first + keys + rows - 1] += diagonals

    def fold(self, grad: torch.Tensor) -> torch.Tensor:
        """The gradient of :attr:`tensor` from one collected by :meth:`grad_into`."""
        if self.offsets is None or self.radius == self.length_q - 1:
            return grad
        index = clamped_offsets(self.radius, self.length_q, self.length_q, grad.device)
        return torch.zeros(self.offsets.shape, dtype=grad.dtype, device=grad.device).index_add_(1, index, grad)


def _rows_per_block(batch: int, heads: int, length: int) -> int:
    return max(1, BLOCK_ELEMENTS // (batch * heads * length))


def _laid_out_whole(heads: int, length: int) -> bool:
    """Whether the bias is small enough to lay out whole (:data:`FULL_MASK_ELEMENTS`)."""
    return heads * length * length <= FULL_MASK_ELEMENTS


def _mask_blocks(blocks: BiasBlocks, length: int, heads: int, dtype: torch.dtype):
    """``(rows, mask)`` per block of query rows: the rows' bias against keys ``0..stop`` with −inf on the
    future, sized so that the mask (their only ``L``-wide temporary) stays within :data:`BLOCK_ELEMENTS`."""
    step = _rows_per_block(blocks.batch, heads, length)
    for start in range(0, length, step):
        stop = min(start + step, length)
        yield slice(start, stop), blocks.masked_block(start, stop, dtype)


class _BlockedCausalBiasAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, values, blocks: BiasBlocks):
        batch, heads, length, dim = q.shape
        ctx.blocks = blocks
        if _laid_out_whole(heads, length):  # one kernel call
            out, lse = _FLASH(q, k, v, 0.0, True, attn_mask=blocks.whole(q.dtype))
            ctx.save_for_backward(q, k, v, out, lse)
            return out
        out = torch.empty_like(q)
        lse = torch.empty(batch, heads, length, dtype=torch.float32, device=q.device)
        for rows, mask in _mask_blocks(blocks, length, heads, q.dtype):
            seen = slice(0, rows.stop)
            out[:, :, rows], lse[:, :, rows] = _FLASH(q[:, :, rows], k[:, :, seen], v[:, :, seen], 0.0, False,
                                                      attn_mask=mask)  # fmt: skip
        ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse = ctx.saved_tensors
        blocks: BiasBlocks = ctx.blocks
        values = blocks.tensor
        if not ctx.needs_input_grad[3]:
            return (*_fixed_bias_backward(grad_out, q, k, v, out, lse, blocks), None, None)
        batch, heads, length, _ = q.shape
        if blocks.flat and _band_pays(batch * heads, blocks.radius, length):
            dvalues = _flat_bias_grad(grad_out, q, k, v, out, lse, blocks)
            return (*_fixed_bias_backward(grad_out, q, k, v, out, lse, blocks), dvalues.to(values.dtype), None)
        return (*_learned_bias_backward(grad_out, q, k, v, out, lse, blocks), None)


def _learned_bias_backward(grad_out, q, k, v, out, lse, blocks: BiasBlocks):
    """dq, dk, dv and the bias gradient in one pass over the rows: the flash backward written out."""
    batch, heads, length, dim = q.shape
    values = blocks.tensor
    scale = dim**-0.5
    delta = (grad_out.float() * out.float()).sum(-1, keepdim=True)  # [B, H, L, 1]
    # [B*H, L, Dh] float32, contiguous once: row blocks of these are matmul-ready without copies
    q2, k2, v2, g2 = (t.float().contiguous().view(batch * heads, length, dim) for t in (q, k, v, grad_out))
    dq, dk, dv = torch.empty_like(q2), torch.zeros_like(k2), torch.zeros_like(v2)
    grad_shape = (heads, 2 * length - 1) if blocks.offsets is not None else values.shape
    dvalues = torch.zeros(grad_shape, dtype=torch.float32, device=values.device)
    q_lse, k_one = _scores_operands(q2 * scale, k2, lse)
    g_delta, v_one = _scores_operands(g2, v2, delta)
    step = _rows_per_block(batch, heads, length)
    for start in range(0, length, step):  # causal: rows start..stop see keys 0..stop only
        stop = min(start + step, length)
        rows, seen, count = slice(start, stop), slice(0, stop), stop - start
        probs = torch.bmm(q_lse[:, rows], k_one[:, seen].transpose(1, 2)).view(batch, heads, count, stop)
        probs = _exp(probs.add_(blocks.block(start, stop, stop, torch.float32)))
        future = torch.ones(count, count, dtype=torch.bool, device=q.device).triu(1)
        probs[..., start:stop].masked_fill_(future, 0.0)  # only the diagonal part reaches the future
        grads = torch.bmm(g_delta[:, rows], v_one[:, seen].transpose(1, 2)).view(batch, heads, count, stop)
        grads = grads.mul_(probs)  # dS = P ⊙ (dP − δ)
        blocks.grad_into(dvalues, grads, start, stop)
        probs, grads = probs.view(batch * heads, count, stop), grads.view(batch * heads, count, stop)
        torch.bmm(grads, k2[:, seen], out=dq[:, rows])  # dQ = dS K
        # dK = dSᵀ Q and dV = Pᵀ dO: a contiguous product added in (baddbmm_ into the strided slice
        # falls back to one matmul per batch entry)
        dk[:, seen] += torch.bmm(grads.transpose(1, 2), q2[:, rows])
        dv[:, seen] += torch.bmm(probs.transpose(1, 2), g2[:, rows])
    shape = (batch, heads, length, dim)
    return (
        dq.mul_(scale).view(shape).to(q.dtype),
        dk.mul_(scale).view(shape).to(k.dtype),
        dv.view(shape).to(v.dtype),
        blocks.fold(dvalues).to(values.dtype),
    )


def _scores_operands(rows: torch.Tensor, keys: torch.Tensor, subtract: torch.Tensor):
    """``[rows, −subtract]`` and ``[keys, 1]``: their product is ``rows·keysᵀ − subtract`` per row, one
    pass over the ``[B, H, r, L]`` product fewer than subtracting after the matmul."""
    ones = torch.ones(*keys.shape[:-1], 1, dtype=keys.dtype, device=keys.device)
    return torch.cat((rows, -subtract.reshape(*rows.shape[:-1], 1)), -1), torch.cat((keys, ones), -1)


def _exp(logits: torch.Tensor) -> torch.Tensor:
    """exp in place; without the process's denormal flush, below e^UNDERFLOW gives 0 (no denormals)."""
    if denormals.flushed():  # the CPU reads and writes them as 0: two passes fewer
        return logits.exp_()
    return F.threshold_(logits.clamp_(min=UNDERFLOW).exp_(), _TINY, 0.0)


def _band_rows(batch_heads: int, radius: int) -> int:
    return max(1, min(BAND_ROWS, BLOCK_ELEMENTS // (batch_heads * (BAND_ROWS + radius))))


def _band_pays(batch_heads: int, radius: int, length: int) -> bool:
    """Whether the band of offsets within ``radius`` (plus a row block) is under half of every row's keys:
    the band kernel then reads less than the causal half that the written-out backward covers."""
    return 2 * (radius + _band_rows(batch_heads, radius)) <= length


def _flat_bias_grad(grad_out, q, k, v, out, lse, blocks: BiasBlocks) -> torch.Tensor:
    """The gradient of the ``[H, 2R + 1]`` values of a bias flat beyond R, from the band of offsets
    −R < j − i ≤ 0 alone.

    Each offset within the band is the sum of dS = P ⊙ (dP − δ) along its diagonal. Every row of dS sums
    to zero over the keys it sees (Σⱼ Pᵢⱼ·dPᵢⱼ = dOᵢ·Oᵢ = δᵢ), so the far offsets, which all take the edge
    value −R, together get minus the band's sum; later offsets are never seen (causal). Cost: L·(R + rows)
    scores instead of L²/2.
    """
    batch, heads, length, dim = q.shape
    radius, rows = blocks.radius, _band_rows(batch * heads, blocks.radius)
    width = rows + radius - 1  # row block start..start+rows sees keys start − R + 1 .. start + rows − 1
    delta = (grad_out.float() * out.float()).sum(-1, keepdim=True)
    flat = (batch * heads, length, dim)
    q_lse, k_one = _scores_operands(q.float().reshape(flat) * dim**-0.5, k.float().reshape(flat), lse)
    g_delta, v_one = _scores_operands(grad_out.float().reshape(flat), v.float().reshape(flat), delta)
    # row t of any block against its window's key u is offset u − t − (R − 1): one bias tile for every block
    offset = torch.arange(width, device=q.device) - torch.arange(rows, device=q.device)[:, None] - (radius - 1)
    tile = blocks.offsets.float()[:, offset.clamp(-radius, radius) + radius].masked_fill(offset > 0, float("-inf"))
    total = torch.zeros(heads, rows, width, dtype=torch.float32, device=q.device)  # Σ of dS over batch, blocks
    for start in range(0, length, rows):
        stop = min(start + rows, length)
        first = max(0, start - radius + 1)  # the first key; the window's first columns fall before key 0
        count, keys, skip = stop - start, stop - first, first - (start - radius + 1)
        window = slice(skip, skip + keys)
        probs = torch.bmm(q_lse[:, start:stop], k_one[:, first:stop].transpose(1, 2)).view(batch, heads, count, keys)
        probs = _exp(probs.add_(tile[:, :count, window]))
        grads = torch.bmm(g_delta[:, start:stop], v_one[:, first:stop].transpose(1, 2))
        total[:, :count, window] += grads.view(batch, heads, count, keys).mul_(probs).sum(0)
    # row t's band is columns t .. t + R − 1 (offsets −(R − 1) .. 0): a stride one longer than a row
    band = total.as_strided((heads, rows, radius), (rows * width, width + 1, 1)).sum(1)
    grad = torch.zeros(blocks.offsets.shape, dtype=torch.float32, device=q.device)
    grad[:, 1 : radius + 1] = band
    grad[:, 0] = -band.sum(1)
    return grad


def _fixed_bias_backward(grad_out, q, k, v, out, lse, blocks: BiasBlocks):
    """dq, dk, dv through ATen's flash backward: the same kernel ``none`` uses, with the bias as its mask."""
    _, heads, length, _ = q.shape
    grad_out = grad_out.contiguous()
    if _laid_out_whole(heads, length):
        return _FLASH_BACKWARD(grad_out, q, k, v, out, lse, 0.0, True, attn_mask=blocks.whole(q.dtype))
    dq, dk, dv = torch.empty_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for rows, mask in _mask_blocks(blocks, length, heads, q.dtype):  # the rows' share of dk, dv
        seen = slice(0, rows.stop)
        dq_rows, dk_seen, dv_seen = _FLASH_BACKWARD(
            grad_out[:, :, rows], q[:, :, rows], k[:, :, seen], v[:, :, seen], out[:, :, rows],
            lse[:, :, rows].contiguous(), 0.0, False, attn_mask=mask,
        )  # fmt: skip
        dq[:, :, rows] = dq_rows
        dk[:, :, seen] += dk_seen
        dv[:, :, seen] += dv_seen
    return dq, dk, dv


def causal_bias_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, blocks: BiasBlocks) -> torch.Tensor:
    """Causal softmax(q·kᵀ/√Dh + bias)·v for ``[B, H, L, Dh]`` inputs on the CPU (``Lq = Lk``)."""
    return _BlockedCausalBiasAttention.apply(q, k, v, blocks.tensor, blocks)
