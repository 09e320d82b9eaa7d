"""Modalities are plugins: one package per modality, each registering a :class:`~poslab.modalities.registry.Modality`
in its ``__init__`` (the record and the registry live in :mod:`poslab.modalities.registry`)."""

from poslab.modalities.registry import (
    Canvas,
    Modality,
    Ref,
    available_modalities,
    get_modality,
    register_modality,
    resolve,
    unregister_modality,
)

__all__ = [
    "Canvas",
    "Modality",
    "Ref",
    "available_modalities",
    "get_modality",
    "register_modality",
    "resolve",
    "unregister_modality",
]
