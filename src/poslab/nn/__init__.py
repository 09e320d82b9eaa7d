"""Model building blocks that know no encoder by name."""

from poslab.nn.attention import SelfAttention
from poslab.nn.backbone import Transformer, TransformerBlock

__all__ = ["SelfAttention", "Transformer", "TransformerBlock"]
