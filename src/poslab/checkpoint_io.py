"""How a run writes its checkpoints: Lightning's own format, with each file's SHA-256 beside it.

``poslab eval`` and ``resume=`` compare a checkpoint with the digest recorded
when it was saved, so a corrupted or replaced file is one clear error instead
of a run resumed from the wrong weights. The digest is taken from the bytes
before they are written, and written so that a kill at any moment leaves a
checkpoint matching a digest on disk (:func:`poslab.rundir.save_with_digest`).
"""

from __future__ import annotations

import io
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from poslab.rundir import remove_with_digest, save_with_digest


class DigestedCheckpointIO(TorchCheckpointIO):
    """Every checkpoint a run saves (best, last) goes through here; under DDP, rank 0's only."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        if storage_options is not None:  # the parent's error for what this writer does not take
            return super().save_checkpoint(checkpoint, path, storage_options)
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        save_with_digest(path, buffer.getvalue())
        return None

    def remove_checkpoint(self, path) -> None:
        remove_with_digest(path)
