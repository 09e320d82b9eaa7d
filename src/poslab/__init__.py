"""poslab: compare position encoders on text, image patches and time series.

Heavy imports (torch, Lightning, W&B) happen in the submodules that need
them, so ``import poslab`` and ``poslab --help`` stay fast.
"""

__version__ = "0.1.0"
