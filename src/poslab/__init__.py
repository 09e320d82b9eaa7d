"""poslab: compare position encoders on text, image patches and time series.

Heavy imports (torch, Lightning, W&B) happen in the submodules that need
them, so ``import poslab`` and ``poslab --help`` stay fast. Modules that moved
to the folders they now live in still import from their old paths
(:mod:`poslab.moved`).
"""

from poslab import moved

__version__ = "0.1.0"

moved.install()
