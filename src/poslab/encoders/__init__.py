"""Position encoders: one module per family, discovered by the registry.

Public API::

    build_encoder(name, *, dim, num_heads, **options) -> PositionEncoder
    available_encoders(modality=None) -> list[str]
"""

from poslab.encoders.base import HOOKS, PositionEncoder
from poslab.encoders.registry import (
    available_encoders,
    build_encoder,
    build_encoder_in_context,
    encoder_class,
    encoder_defaults,
    encoder_options,
    register_encoder,
)

__all__ = [
    "HOOKS",
    "PositionEncoder",
    "available_encoders",
    "build_encoder",
    "build_encoder_in_context",
    "encoder_class",
    "encoder_defaults",
    "encoder_options",
    "register_encoder",
]
