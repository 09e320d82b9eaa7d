"""Attention with an additive bias through FlexAttention (the CUDA path).

The bias never exists as an ``L × L`` tensor: a ``score_mod`` adds, to each
score, the value of its offset ``k − q`` (an offset-only bias: ``[H, Lq + Lk − 1]``
values) or reads a dense ``[1 | B, H, Lq, Lk]`` bias; a ``BlockMask`` skips the
blocks a causal or structured model never attends (He et al. 2024,
"FlexAttention"). Gradients reach learned biases through the captured values.

:data:`AVAILABLE` is False on a torch without ``torch.nn.attention.flex_attention``;
attention then falls back to SDPA. FlexAttention needs ``torch.compile`` to be
fused (its eager form materialises the scores) and has no backward on the CPU,
so it is used on CUDA; its forward numerics are tested on the CPU.
"""

from __future__ import annotations

import functools

import torch

try:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
except ImportError:  # torch < 2.5
    create_block_mask = flex_attention = None

#: Whether this torch has FlexAttention.
AVAILABLE = flex_attention is not None


def offset_score_mod(values: torch.Tensor, length_q: int):
    """``score + values[h, k − q + Lq − 1]``: an offset-only bias read per score."""

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + values[h, kv_idx - q_idx + length_q - 1].to(score.dtype)

    return score_mod


def dense_score_mod(bias: torch.Tensor):
    """``score + bias[b | 0, h, q, k]``: a bias that is not offset-only (randomized positions, …)."""
    per_sequence = bias.shape[0] > 1

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + bias[b if per_sequence else 0, h, q_idx, kv_idx].to(score.dtype)

    return score_mod


@functools.lru_cache(maxsize=32)
def causal_block_mask(length_q: int, length_k: int, device: str):
    """The causal ``BlockMask`` of one shape, made once (building it costs more than using it). Made outside
    inference mode even when validation asks first: FlexAttention saves the mask for the backward pass, and
    a training step cannot save an inference tensor."""
    with torch.inference_mode(False):
        return create_block_mask(lambda b, h, q, k: q >= k, None, None, length_q, length_k, device=device)


def allowed_block_mask(allowed: torch.Tensor, causal: bool):
    """A ``BlockMask`` from a boolean ``[Lq, Lk]`` structure mask (and the causal rule)."""

    def mask_mod(b, h, q, k):
        keep = allowed[q, k]
        return keep & (q >= k) if causal else keep

    length_q, length_k = allowed.shape
    return create_block_mask(mask_mod, None, None, length_q, length_k, device=str(allowed.device))


#: How FlexAttention is compiled: with dynamic shapes from the start. A run meets many shapes (training,
#: validation and test batches, a last partial batch, the length-generalisation lengths), and dynamo's
#: recompile limit (8) counts every graph of the one function: static shapes compiled one per shape, and
#: automatic dynamic still made four graphs per kind of bias (measured: offsets and dense, twelve shapes,
#: eight graphs). Past the limit, FlexAttention runs unfused, laying out every ``L x L`` score. (A compiled
#: backbone, ``model.compile=true``, traces FlexAttention into its own graph instead.)
COMPILE_OPTIONS = {"dynamic": True}


#: Tiles on CUDA. FlexAttention's defaults for Hopper at head size 64 (torch 2.11) ask for 240 KiB of
#: shared memory in float32 and in bf16, over the H200's 227 KiB: "out of resource" when the kernel is
#: built (measured by ``make gpu-check``). A 64 × 32 tile in two stages fits.
CUDA_KERNEL_OPTIONS = {"BLOCK_M": 64, "BLOCK_N": 32, "num_stages": 2}


def kernel_options(q: torch.Tensor) -> dict | None:
    """The tiles for ``q``'s device (None: FlexAttention's own, on the CPU)."""
    return CUDA_KERNEL_OPTIONS if q.is_cuda else None


@functools.cache
def _compiled():
    return torch.compile(flex_attention, **COMPILE_OPTIONS)


def flex_bias_attention(q, k, v, score_mod, block_mask, compiled: bool = True) -> torch.Tensor:
    """FlexAttention, compiled (fused) by default; ``compiled=False`` for the CPU reference checks.

    Compiled even where the caller runs eagerly under ``torch.compiler.set_stance("force_eager")`` (the
    end-of-run evaluations do, at many lengths): eager FlexAttention would lay out every ``L x L`` score.
    """
    # inside a compiled model, traced into its graph and fused with it (calling the compiled wrapper from
    # traced code would break the graph)
    options = kernel_options(q)
    if not compiled or torch.compiler.is_compiling():
        return flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask, kernel_options=options)
    with torch.compiler.set_stance("default"):
        return _compiled()(q, k, v, score_mod=score_mod, block_mask=block_mask, kernel_options=options)
