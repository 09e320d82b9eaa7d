"""Modalities are plugins: one package per modality, each registering a :class:`~poslab.plugins.Modality`
in its ``__init__`` (the record and the registry live in :mod:`poslab.plugins`)."""

from poslab.plugins import (
    Modality,
    Ref,
    available_modalities,
    get_modality,
    register_modality,
    resolve,
    unregister_modality,
)

__all__ = [
    "Modality",
    "Ref",
    "available_modalities",
    "get_modality",
    "register_modality",
    "resolve",
    "unregister_modality",
]
