"""Flush float32 denormals to zero in a poslab process, before torch starts its worker threads.

A softmax over a steep additive bias (ALiBi's far keys) yields probabilities
between 1e-38 and 1e-45: float32 denormals, which x86 CPUs compute about 100x
slower than normal numbers. One attention layer at L = 1024 (batch 4, 4
heads) took 71 ms with ALiBi against 33 ms without a bias, and 38 ms once
denormals were flushed (``make bench``: ALiBi's training step 1.58x ``none``
-> 1.15x). Numbers that small change no gradient a float32 run can represent.

The flag (FTZ / DAZ) lives in each thread's MXCSR register, and torch's
OpenMP workers inherit it only when they are created: set after the first
parallel operation, it reaches the calling thread alone and the cost stays.
So the ``poslab`` command sets it first thing (:func:`poslab.cli.run`);
code that imports poslab as a library keeps torch's default unless it calls
:func:`flush_denormals` itself, as early.
"""

from __future__ import annotations

_flushed = False


def flush_denormals() -> bool:
    """Turn on flush-to-zero for this process's threads to come; True where the CPU supports it."""
    import torch  # deferred: torch, ~2.3 s

    global _flushed
    _flushed = torch.set_flush_denormal(True)
    return _flushed


def flushed() -> bool:
    """Whether :func:`flush_denormals` turned flushing on (kernels then skip their own guards)."""
    return _flushed
