"""``none``: no position information at all.

With bidirectional attention and a permutation-invariant pooling the model is
then invariant to the order of its tokens (tested): the ablation baseline
every other encoder must beat. With a causal mask, order still leaks through
the mask (Haviv et al. 2022, "Transformer language models without positional
encodings still learn positional information").
"""

from poslab.encoders.base import PositionEncoder
from poslab.encoders.registry import register_encoder


@register_encoder("none")
class NoPosition(PositionEncoder):
    paper = "Haviv et al. 2022"
    reads = None

    def __init__(self, dim: int, num_heads: int) -> None:
        super().__init__(dim, num_heads)
