"""Causal attention with an additive bias on the CPU, one block of query rows at a time.

SDPA can take a bias only as a float mask: on the CPU that is a full
``[B | 1, H, L, L]`` tensor, and differentiating it goes through the general
kernel, which saves the ``[B, H, L, L]`` attention of every layer. Here:

* forward: ATen's CPU flash kernel with the causal flag and the bias as its
  mask, laid out once for every layer up to :data:`FULL_MASK_ELEMENTS`; past
  that, on each block of query rows against the keys up to the block's last
  row, with that block's bias built from the offsets' values (or sliced from
  a dense bias). It saves only the log-sum-exp.
* past the whole layout, a bias flat beyond some offset R (T5, Shaw) or a
  fixed one linear in the offset (ALiBi) splits its keys instead: the near
  ones (offsets −(R − 1) … 0) through the kernel with a small mask, the far
  ones through one causal call without a mask (a flat bias is a constant
  there; a linear one rides in two more columns of queries and keys), the
  two softmaxes merged by their log-sum-exps (:func:`_split_forward`).
* backward of a bias that needs no gradient: ATen's CPU flash backward on
  the same parts.
* backward of a learned bias flat beyond an offset R well inside the
  sequence (T5, Shaw): the same, and the bias gradient from the band of
  offsets within R only (:func:`_flat_bias_grad`).
* backward of any other learned bias (KERPLE, FIRE): the flash backward
  written out per row block for the whole batch (Dao et al. 2022,
  FlashAttention, Alg. 4): the probabilities P and dS = P ⊙ (dP − rowsum(dO ⊙ O))
  are computed once and give dq, dk, dv and the bias gradient Σ_b dS_b,
  reduced onto the offsets for an offset-only bias.

Every layout of an offset bias has its value at offset 0 taken off
(:meth:`BiasBlocks.centred`).

Past the whole layout, memory therefore grows with L·block, not L², for any
offset-only bias.

Relies on ``torch.ops.aten._scaled_dot_product_flash_attention_for_cpu`` and
its ``_backward``, private ops: :data:`AVAILABLE` is False where one is
missing or takes no mask, and attention then falls back to SDPA. Tested with
torch 2.14 (the pinned version).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from poslab.positions.offsets import clamped_offsets, expand_offsets, offset_radius, toeplitz_rows
from poslab.run import denormals

_FLASH = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
_FLASH_BACKWARD = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu_backward", None)


def _takes_a_mask(op) -> bool:
    return op is not None and "attn_mask" in str(op.default._schema)


#: Whether the private ATen ops this kernel relies on exist in this torch and take a mask.
AVAILABLE = _takes_a_mask(_FLASH) and _takes_a_mask(_FLASH_BACKWARD)
#: Input dtypes the kernel takes (its log-sum-exps and gradient sums are float32); others go to SDPA.
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
#: Elements of one float32 temporary per block: the query rows per block follow from it
#: (measured with ``make bench``: 2^20–2^21 best at L = 1024).
BLOCK_ELEMENTS = 1 << 21
#: Up to this many ``[H, L, L]`` elements the bias is laid out whole, once per forward pass for every
#: layer: the forward is one kernel call and the backward reads views of it (``make bench``, L = 1024:
#: T5 1.47x ``none`` against 1.67x block by block; L = 2048: 1.72x against 1.91x). Past it (L = 4096 with
#: 4 heads), every block is built from the offsets and memory stays at ``none``'s.
FULL_MASK_ELEMENTS = 1 << 24
#: Query rows per block of a flat bias's band gradient (:func:`_flat_bias_grad`), at most: its scores are
#: ``[B, H, rows, rows + R − 1]``, kept within :data:`BLOCK_ELEMENTS` (one layer, batch 4 x 4 heads: at
#: L = 2048, R = 128, 16.2 ms with 32 rows, 17.7 ms with 64; at L = 1024, R = 32, 5.8 against 5.9 ms).
#: The split's near keys take twice as many rows per kernel call (64 against 128 or 256: faster).
BAND_ROWS = 32
#: A learned bias flat beyond R takes its gradient from the band of offsets within R (plus a row block) where
#: that band is at most 1/BAND_FRACTION of the sequence: it then reads less than the written-out backward's
#: causal half.
BAND_FRACTION = 2
#: Past the whole layout, a bias flat beyond R splits its keys into near ones (with the bias) and far ones
#: (without) where the band R + rows is at most 1/SPLIT_FRACTION of the sequence. A training step at
#: L = 4096 (the ``make bench`` model): T5 1.66x ``none`` -> 1.25x, Shaw 1.66x -> 1.22x. Where the bias is
#: laid out whole, that layout serves every layer and the split did not pay (L = 1024, 2048).
SPLIT_FRACTION = 8
#: A fixed bias linear in the offset on the causal side (ALiBi) splits its keys the same way around this
#: band, the far keys' slope in two more columns of queries and keys. A training step at L = 4096: ALiBi
#: 1.64x ``none`` -> 1.27x (band 128: 1.36x; 32: 1.26x, with float32 errors twice the masked kernel's for
#: slopes that are not powers of two; at 64 they equal it).
LINEAR_BAND = 64
#: Values (less the one at offset 0) within this fraction of the line's range, slope·(L − 1), of the line
#: through offsets 0 and −(L − 1) count as linear: float32 ALiBi values are within 6e−8 of it.
LINEAR_TOLERANCE = 1e-6
#: Unless the process flushes denormals (:mod:`poslab.run.denormals`, as the ``poslab`` command does),
#: probabilities below e^UNDERFLOW ≈ 1e−30 are taken as 0 in the backward. Left alone, float32 turns
#: them (and their products) into denormals, which the CPU computes far slower: ALiBi's far keys made
#: the whole training step 4.9x ``none`` at L = 1024 (1.6x with this cut). The change to any gradient
#: is below 1e−30 per key.
UNDERFLOW = -69.0
_TINY = 2 * math.exp(UNDERFLOW)


class BiasBlocks:
    """The bias of one attention call, served one block of rows at a time.

    ``offsets``: values ``[H, 2R + 1]`` of an offset-only bias at the offsets
    ``−R … R``, offsets beyond ±R taking the edge values (R < L − 1 for a bias
    flat beyond R; any R ≥ L − 1 reads the values it needs), or ``dense``:
    ``[1 | B, H, Lq, Lq]``. Exactly one is given.
    """

    def __init__(self, length_q: int, offsets: torch.Tensor | None = None, dense: torch.Tensor | None = None):
        if (offsets is None) == (dense is None):
            raise ValueError("BiasBlocks needs exactly one of offsets or dense")
        self.length_q, self.offsets, self.dense = length_q, offsets, dense
        self.radius = None if offsets is None else offset_radius(offsets)
        self._sources: dict[torch.dtype, torch.Tensor] = {}
        self._centred: torch.Tensor | None = None
        self._tiles: dict[tuple[int, int, torch.dtype], torch.Tensor] = {}
        self._slopes: torch.Tensor | None = None
        self._slopes_read = False
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

    def far_slopes(self) -> torch.Tensor | None:
        """Per head, the slope of offsets' values that are linear on the causal side (ALiBi: values
        m·(j − i) for j ≤ i), else None. Read from the values once: they live on the CPU (no stall)."""
        if not self._slopes_read:
            self._slopes_read = True
            if self.offsets is not None and self.radius == self.length_q - 1 and self.length_q > 1:
                past = self.centred()[:, : self.length_q]  # offsets −(L − 1) … 0, the last one 0
                slopes = -past[:, 0] / (self.length_q - 1)
                line = slopes[:, None] * torch.arange(-(self.length_q - 1), 1, device=past.device)
                reach = LINEAR_TOLERANCE * (1 + slopes.abs()[:, None] * (self.length_q - 1))
                if bool(((past - line).abs() <= reach).all()):
                    self._slopes = slopes
        return self._slopes

    def split_band(self, learned: bool, dtype: torch.dtype) -> int | None:
        """R where the keys can go apart: near ones (offsets −(R − 1) … 0) with the bias, far ones without
        it (a flat bias) or with its slope in two more columns (a fixed linear one, float32 only)."""
        if self.flat:
            return self.radius
        if not learned and dtype == torch.float32 and LINEAR_BAND < self.length_q - 1 and self.far_slopes() is not None:
            return LINEAR_BAND
        return None

    def centred(self) -> torch.Tensor:
        """The offsets' values less the one at offset 0, float32: what every layout of them holds (the
        softmax is the same, and logits by the diagonal stay near 0, where float32 is most precise)."""
        if self._centred is None:
            values = self.offsets.float()
            self._centred = values - values[:, self.radius, None]
        return self._centred

    def _source(self, dtype: torch.dtype) -> torch.Tensor:
        """The ``[H, 2L − 1]`` value of every offset (or the dense bias) in ``dtype``, made once."""
        if dtype not in self._sources:
            length = self.length_q
            source = self.dense if self.offsets is None else expand_offsets(self.centred(), length, length)
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

    def value_at(self, offset: int) -> torch.Tensor:
        """``[H]``: the bias at ``offset`` (:meth:`centred`)."""
        return self.centred()[:, min(max(offset, -self.radius), self.radius) + self.radius]

    def band_tile(self, rows: int, band: int, dtype: torch.dtype) -> torch.Tensor:
        """``[1, H, rows, rows + R − 1]`` (R = ``band``): any block of ``rows`` query rows against its window of
        keys, from R − 1 before its first row to its last, row t and column u being offset u − t − (R − 1) (the
        same in every block): the values (:meth:`centred`) within the band of offsets −(R − 1) … 0, −inf
        outside it. Made once per shape."""
        key = (rows, band, dtype)
        if key not in self._tiles:
            width = rows + band - 1
            device = self.offsets.device
            offset = torch.arange(width, device=device) - torch.arange(rows, device=device)[:, None] - (band - 1)
            tile = self.centred()[:, offset.clamp(-self.radius, self.radius) + self.radius]
            self._tiles[key] = tile.masked_fill((offset > 0) | (offset <= -band), float("-inf"))[None].to(dtype)
        return self._tiles[key]

    def grad_into(self, grad: torch.Tensor, block_grad: torch.Tensor, start: int, stop: int) -> None:
        """Put a block's gradient ``[B, H, r, end]`` into ``grad`` (each block's rows once): shaped like
        :attr:`tensor` (a dense bias), or for offsets
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
        # ``values`` (blocks.tensor) is read through ``blocks``; passed so that autograd routes its gradient
        batch, heads, length, dim = q.shape
        ctx.blocks = blocks
        # past the whole layout, a flat or linear bias: near keys with the bias, far keys without
        laid_out = _laid_out_whole(heads, length)
        band = None if laid_out else blocks.split_band(ctx.needs_input_grad[3], q.dtype)
        ctx.band = band if band is not None and _band_within(batch * heads, band, length, SPLIT_FRACTION) else None
        if ctx.band is not None:
            out, lse = _split_forward(q, k, v, blocks, ctx.band)
        elif laid_out:  # one kernel call
            out, lse = _FLASH(q, k, v, 0.0, True, attn_mask=blocks.whole(q.dtype))
        else:
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
        learned = ctx.needs_input_grad[3]
        batch, heads, length, _ = q.shape
        if learned and not (blocks.flat and _band_within(batch * heads, blocks.radius, length, BAND_FRACTION)):
            return (*_learned_bias_backward(grad_out, q, k, v, out, lse, blocks), None)
        dvalues = _flat_bias_grad(grad_out, q, k, v, out, lse, blocks).to(blocks.tensor.dtype) if learned else None
        if ctx.band is not None:
            return (*_split_backward(grad_out, q, k, v, out, lse, blocks, ctx.band), dvalues, None)
        return (*_fixed_bias_backward(grad_out, q, k, v, out, lse, blocks), dvalues, None)


def _learned_bias_backward(grad_out, q, k, v, out, lse, blocks: BiasBlocks):
    """dq, dk, dv and the bias gradient in one pass over the rows: the flash backward written out."""
    batch, heads, length, dim = q.shape
    values = blocks.tensor
    scale = dim**-0.5
    # [B*H, L, Dh] float32, contiguous once: row blocks of these are matmul-ready without copies
    q2, k2, v2, g2 = (t.float().contiguous().view(batch * heads, length, dim) for t in (q, k, v, grad_out))
    dq, dk, dv = torch.empty_like(q2), torch.zeros_like(k2), torch.zeros_like(v2)
    grad_shape = (heads, 2 * length - 1) if blocks.offsets is not None else values.shape
    dvalues = torch.zeros(grad_shape, dtype=torch.float32, device=values.device)
    q_lse, k_one, g_delta, v_one = _dS_operands(grad_out, q, k, v, out, lse)
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


def _dS_operands(grad_out, q, k, v, out, lse):
    """``(q_lse, k_one, g_delta, v_one)``, each ``[B·H, L, Dh + 1]`` float32 (one copy of each input,
    matmul-ready): ``q_lse·k_oneᵀ`` is the scaled logits less the log-sum-exp (its exp, plus the bias, is P)
    and ``g_delta·v_oneᵀ`` is dP − δ, δ = rowsum(dO ⊙ O): the two products dS = P ⊙ (dP − δ) is made of."""
    batch, heads, length, dim = q.shape
    delta = (grad_out.float() * out.float()).sum(-1, keepdim=True)  # [B, H, L, 1]
    flat = (batch * heads, length, dim + 1)
    q_lse, k_one = (t.reshape(flat) for t in _scores_operands(q.float() * dim**-0.5, k.float(), lse))
    g_delta, v_one = (t.reshape(flat) for t in _scores_operands(grad_out.float(), v.float(), delta))
    return q_lse, k_one, g_delta, v_one


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


def _band_within(batch_heads: int, radius: int, length: int, fraction: float) -> bool:
    """Whether the band of offsets within ``radius`` (plus a row block) is at most ``1 / fraction`` of the
    sequence (:data:`BAND_FRACTION`, :data:`SPLIT_FRACTION`)."""
    return radius >= 1 and fraction * (radius + _band_rows(batch_heads, radius)) <= length


def _band_windows(length: int, radius: int, rows: int):
    """``(rows, keys, columns)`` per block of query rows: its keys from R − 1 before its first row (or
    key 0) to its last row, and which columns of :meth:`BiasBlocks.band_tile` they are."""
    for start in range(0, length, rows):
        stop = min(start + rows, length)
        first = max(0, start - radius + 1)
        skip = first - (start - radius + 1)  # window columns that would fall before key 0
        yield slice(start, stop), slice(first, stop), slice(skip, skip + stop - first)


def _near_rows(batch_heads: int, radius: int, length: int) -> int:
    """Query rows per block of near keys: at least R − 1, so that a block's window reaches back into the
    previous block only, and at most the sequence."""
    return min(max(2 * _band_rows(batch_heads, radius), radius - 1), length)


def _near_runs(length: int, radius: int, rows: int):
    """``(start, count, size, head)``: runs of ``count`` blocks of ``size`` query rows from ``start``, each
    against the ``head`` keys before its first row and its own rows. The first block has no key before it;
    the full blocks after it go to the kernel together, as one batch; a short last block comes alone."""
    full = length // rows
    yield 0, 1, rows, 0
    if full > 1:
        yield rows, full - 1, rows, radius - 1
    if length > full * rows:
        yield full * rows, 1, length - full * rows, radius - 1


def _as_blocks(x: torch.Tensor, start: int, count: int, size: int) -> torch.Tensor:
    """Rows ``start …`` of ``[B, H, L, …]`` as ``count`` blocks of ``size`` rows in the batch:
    ``[B·count, H, size, …]``."""
    batch, heads, _, *rest = x.shape
    blocks = x[:, :, start : start + count * size].reshape(batch, heads, count, size, *rest).transpose(1, 2)
    return blocks.reshape(batch * count, heads, size, *rest)


def _as_windows(x: torch.Tensor, first: int, count: int, size: int, width: int) -> torch.Tensor:
    """``count`` windows of ``width`` rows of ``[B, H, L, D]``, from ``first`` every ``size``:
    ``[B·count, H, width, D]``."""
    batch, heads, _, dim = x.shape
    windows = x[:, :, first : first + (count - 1) * size + width].unfold(2, width, size)  # [B, H, count, D, width]
    return windows.permute(0, 2, 1, 4, 3).reshape(batch * count, heads, width, dim)


def _from_blocks(y: torch.Tensor, batch: int) -> torch.Tensor:
    """Inverse of :func:`_as_blocks`: ``[B·count, H, size, …]`` -> ``[B, H, count·size, …]``."""
    count, heads, size, *rest = y.shape[0] // batch, *y.shape[1:]
    return y.reshape(batch, count, heads, size, *rest).transpose(1, 2).reshape(batch, heads, count * size, *rest)


def _add_windows(target: torch.Tensor, grads: torch.Tensor, start: int, count: int, size: int, head: int) -> None:
    """Add the key gradients of :func:`_near_runs`' windows (``[B·count, H, head + size, D]``) into ``target``:
    each window's own rows, and its ``head`` rows, which are the previous block's last ones."""
    batch, heads, _, dim = target.shape
    grads = grads.view(batch, count, heads, head + size, dim).transpose(1, 2)
    target[:, :, start : start + count * size].view(batch, heads, count, size, dim).add_(grads[..., head:, :])
    if head and count == 1:
        target[:, :, start - head : start] += grads[:, :, 0, :head]
    elif head:
        previous = target[:, :, start - size : start - size + count * size].view(batch, heads, count, size, dim)
        previous[..., size - head :, :] += grads[..., :head, :]


def _split_forward(q, k, v, blocks: BiasBlocks, band: int):
    """Attention with the keys split at offset −R (R = ``band``): the near keys (offsets −(R − 1) … 0) block
    by block with the band tile as mask (the blocks of a run in one kernel call, as a batch), the far keys
    (every offset ≤ −R) in one kernel call without a mask (rows R … L − 1 against keys 0 … L − R − 1 is a
    causal square; a flat bias is a constant there, folded into that part's log-sum-exp, and a linear one
    rides in two more columns: :class:`_FarKeys`), and the two softmaxes merged through their log-sum-exps."""
    batch, heads, length, _ = q.shape
    rows = _near_rows(batch * heads, band, length)
    tile = blocks.band_tile(rows, band, q.dtype)
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty(batch, heads, length, dtype=torch.float32, device=q.device)
    for start, count, size, head in _near_runs(length, band, rows):
        mask = tile[:, :, :size, band - 1 - head : band - 1 + size]
        near = _FLASH(
            _as_blocks(q, start, count, size), _as_windows(k, start - head, count, size, head + size),
            _as_windows(v, start - head, count, size, head + size), 0.0, False, attn_mask=mask,
        )  # fmt: skip
        out[:, :, start : start + count * size] = _from_blocks(near[0], batch)
        lse[:, :, start : start + count * size] = _from_blocks(near[1], batch)
    far = _FarKeys(q, k, v, blocks, band)
    far_out, far_lse = _FLASH(*far.inputs, 0.0, True, scale=far.scale)
    far_out, far_lse = far.output(far_out), far.true_lse(far_lse)
    near_lse = lse[:, :, band:]
    both = torch.logaddexp(far_lse, near_lse)
    out[:, :, band:] = far_out.float() * (far_lse - both).exp().unsqueeze(-1) + out[:, :, band:].float() * (
        near_lse - both
    ).exp().unsqueeze(-1)
    lse[:, :, band:] = both
    return out, lse


def _split_backward(grad_out, q, k, v, out, lse, blocks: BiasBlocks, band: int):
    """dq, dk, dv of :func:`_split_forward`: ATen's flash backward on each of its parts, given the merged
    output and log-sum-exp (so each part's P and δ are the whole softmax's)."""
    batch, heads, length, _ = q.shape
    rows = _near_rows(batch * heads, band, length)
    tile = blocks.band_tile(rows, band, q.dtype)
    # each key's gradient adds up a few parts: in float32, whatever the inputs' dtype
    dq, dk, dv = (torch.zeros(t.shape, dtype=torch.float32, device=t.device) for t in (q, k, v))
    for start, count, size, head in _near_runs(length, band, rows):
        width = head + size
        dq_near, dk_near, dv_near = _FLASH_BACKWARD(
            _as_blocks(grad_out, start, count, size), _as_blocks(q, start, count, size),
            _as_windows(k, start - head, count, size, width), _as_windows(v, start - head, count, size, width),
            _as_blocks(out, start, count, size), _as_blocks(lse, start, count, size), 0.0, False,
            attn_mask=tile[:, :, :size, band - 1 - head : band - 1 + size],
        )  # fmt: skip
        dq[:, :, start : start + count * size] = _from_blocks(dq_near, batch)
        _add_windows(dk, dk_near, start, count, size, head)
        _add_windows(dv, dv_near, start, count, size, head)
    far = _FarKeys(q, k, v, blocks, band)
    dq_far, dk_seen, dv_seen = _FLASH_BACKWARD(
        far.widened(grad_out[:, :, band:].contiguous()), *far.inputs, far.widened(out[:, :, band:]),
        far.kernel_lse(lse[:, :, band:]), 0.0, True, scale=far.scale,
    )  # fmt: skip
    seen = slice(0, length - band)
    dq[:, :, band:] += far.output(dq_far, scaled=True)
    dk[:, :, seen] += far.output(dk_seen)
    dv[:, :, seen] += far.output(dv_seen)
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


class _FarKeys:
    """The far part of :func:`_split_forward`: rows R … L − 1 (local row t = i − R) against keys
    0 … L − R − 1, causal, where the bias (less its value at offset 0, as everywhere) is
    e + m·(j − t): e = its value at −R, m = 0 for a flat bias, the slope for a linear one.

    e is the same for every key of a row, so only the log-sum-exp moves by it. m rides in two more
    columns put first, [m, −m·t] on the queries and [j, 1] on the keys (zeros on the values), with the
    queries scaled beforehand: the kernel's dot product adds m·j − m·t, exact for a power-of-two slope,
    before the small terms of q·k, instead of rounding them at m·L's magnitude."""

    def __init__(self, q, k, v, blocks: BiasBlocks, band: int):
        batch, heads, length, dim = q.shape
        size = length - band
        self.edge = blocks.value_at(-band).view(1, heads, 1)
        slopes = blocks.far_slopes()  # None for a flat bias
        self.linear = slopes is not None
        self.scale = self.query_scale = dim**-0.5  # the kernel's; the queries' own
        q, k, v = q[:, :, band:], k[:, :, :size], v[:, :, :size]
        if self.linear:
            steps = torch.arange(size, dtype=q.dtype, device=q.device)
            slopes = slopes.to(q.dtype).view(1, heads, 1, 1)
            shape = (batch, heads, size, 1)
            shifts = (-slopes * steps.view(1, 1, size, 1)).expand(shape)
            q = torch.cat((slopes.expand(shape), shifts, q * self.scale), -1)
            k = torch.cat((steps.view(1, 1, size, 1).expand(shape), k.new_ones(shape), k), -1)
            v, self.scale = self.widened(v), 1.0
        self.inputs = (q, k, v)

    def widened(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` with the two zero columns the values carry (a linear bias), else as it is."""
        return torch.cat((x.new_zeros(*x.shape[:-1], 2), x), -1) if self.linear else x

    def output(self, y: torch.Tensor, scaled: bool = False) -> torch.Tensor:
        """A result without the two columns; ``scaled``: the queries' gradient, back to unscaled queries."""
        if not self.linear:
            return y
        return y[..., 2:] * self.query_scale if scaled else y[..., 2:]

    def true_lse(self, lse: torch.Tensor) -> torch.Tensor:
        """The kernel's log-sum-exp with e put back."""
        return lse + self.edge

    def kernel_lse(self, lse: torch.Tensor) -> torch.Tensor:
        """A log-sum-exp as the kernel's own logits (without e) have it."""
        return (lse - self.edge).contiguous()


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
    q_lse, k_one, g_delta, v_one = _dS_operands(grad_out, q, k, v, out, lse)
    tile = blocks.band_tile(rows, radius, torch.float32)  # the same shift as the forward's log-sum-exp
    # per batch entry and head, so that each block takes four ops: the tile added inside the first
    # product (baddbmm), exp, the second product, and dS = P ⊙ (dP − δ) summed in place (addcmul_)
    tile = tile.expand(batch, -1, -1, -1).reshape(batch * heads, *tile.shape[-2:])
    total = torch.zeros_like(tile)  # Σ of dS over the blocks, by tile position
    for block, keys, columns in _band_windows(length, radius, rows):
        count = block.stop - block.start
        probs = _exp(torch.baddbmm(tile[:, :count, columns], q_lse[:, block], k_one[:, keys].transpose(1, 2)))
        grads = torch.bmm(g_delta[:, block], v_one[:, keys].transpose(1, 2))
        total[:, :count, columns].addcmul_(grads, probs)
    total = total.view(batch, heads, *tile.shape[-2:]).sum(0)
    # row t's band is tile columns t .. t + R − 1 (offsets −(R − 1) .. 0): a stride one longer than a row
    width = total.shape[-1]
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
    dq = torch.empty_like(q)
    # dk, dv add up every block's share: in float32, whatever the inputs' dtype (bf16 sums drift)
    dk, dv = (torch.zeros(t.shape, dtype=torch.float32, device=t.device) for t in (k, v))
    for rows, mask in _mask_blocks(blocks, length, heads, q.dtype):  # the rows' share of dk, dv
        seen = slice(0, rows.stop)
        dq_rows, dk_seen, dv_seen = _FLASH_BACKWARD(
            grad_out[:, :, rows], q[:, :, rows], k[:, :, seen], v[:, :, seen], out[:, :, rows],
            lse[:, :, rows].contiguous(), 0.0, False, attn_mask=mask,
        )  # fmt: skip
        dq[:, :, rows] = dq_rows
        dk[:, :, seen] += dk_seen
        dv[:, :, seen] += dv_seen
    return dq, dk.to(k.dtype), dv.to(v.dtype)


def causal_bias_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, blocks: BiasBlocks) -> torch.Tensor:
    """Causal softmax(q·kᵀ/√Dh + bias)·v for ``[B, H, L, Dh]`` inputs on the CPU (``Lq = Lk``)."""
    return _BlockedCausalBiasAttention.apply(q, k, v, blocks.tensor, blocks)
