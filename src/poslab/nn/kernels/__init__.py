"""Attention kernels for additive position biases, one module per device family.

* :mod:`~poslab.nn.kernels.cpu_flash` — the CPU: ATen's flash kernel one block
  of query rows at a time, with a backward that also returns the bias gradient.
* :mod:`~poslab.nn.kernels.flex` — CUDA: FlexAttention with a ``score_mod``
  that reads the bias from its offsets, and a causal ``BlockMask``.

Both build the bias block by block from what :class:`~poslab.nn.attention.AttentionBias`
holds, so an offset-only bias costs no ``L × L`` tensor. Both are feature-detected:
where the private op or FlexAttention is missing, attention falls back to SDPA.
"""
