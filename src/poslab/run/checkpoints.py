"""How a run writes its checkpoints: Lightning's own format, with each file's SHA-256 beside it.

``poslab eval`` and ``resume=`` compare a checkpoint with the digest recorded
when it was saved, so a corrupted or replaced file is one clear error instead
of a run resumed from the wrong weights. The digest is taken from the bytes
before they are written, and written so that a kill at any moment leaves a
checkpoint matching a digest on disk (:func:`save_with_digest`).
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from poslab import files
from poslab.errors import DataError, first_line


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


# -- checkpoint digests -------------------------------------------------------------------------
DIGEST_SUFFIX = ".sha256"


#: Beside a checkpoint being replaced: the new checkpoint's digest, written before the replace, removed
#: once the digest file has it (:func:`save_with_digest`).
PENDING_SUFFIX = ".sha256.pending"


def _beside(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def save_with_digest(path: str | Path, data: bytes) -> str:
    """Write a checkpoint's bytes with their SHA-256 beside them (``<path>.sha256``, ``sha256sum`` format);
    returns the digest. The new digest goes down first, as pending, then the checkpoint is replaced, then
    the digest file: a kill at any point leaves a checkpoint that matches a digest on disk (the recorded one
    or the pending one), and any other change still reads as corruption (:func:`verify_digest`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(data).hexdigest()
    line = f"{digest}  {path.name}\n".encode()
    pending = _beside(path, PENDING_SUFFIX)
    files.write_atomic(pending, line)
    files.write_atomic(path, data)
    files.write_atomic(_beside(path, DIGEST_SUFFIX), line)
    pending.unlink(missing_ok=True)
    return digest


def remove_with_digest(path: str | Path) -> None:
    """A checkpoint and the digests beside it."""
    for suffix in ("", DIGEST_SUFFIX, PENDING_SUFFIX):
        _beside(Path(path), suffix).unlink(missing_ok=True)


def _digest_in(sidecar: Path) -> str | None:
    try:
        return sidecar.read_text().split()[0]
    except (OSError, IndexError):
        return None


def recorded_digest(path: str | Path) -> str | None:
    return _digest_in(_beside(Path(path), DIGEST_SUFFIX))


def verify_digest(path: str | Path) -> str | None:
    """A checkpoint whose bytes differ from the digest recorded when it was saved: one clear line. A save
    cut between its replace and its digest left the new digest pending: that one matches too. Without a
    digest (missing, empty, not a file) the checkpoint is verified by loading it (:func:`verify_by_loading`),
    and the warning to print once it is used is returned (None: its bytes were verified)."""
    path = Path(path)
    expected = {d for d in (recorded_digest(path), _digest_in(_beside(path, PENDING_SUFFIX))) if d}
    if not expected:
        return verify_by_loading(path)
    if files.file_sha256(path) not in expected:
        raise DataError(
            f"checkpoint {path} does not match the SHA-256 recorded when it was saved (corrupt or replaced); "
            f"expected {' or '.join(sorted(d[:12] + '…' for d in expected))}"
        )
    return None


#: What training learned, in a Lightning checkpoint: every float in it must be finite (callbacks' states may
#: hold an infinity on purpose: a checkpoint callback's best score before the first validation).
LEARNED_STATE = ("state_dict", "optimizer_states")


def verify_by_loading(path: Path) -> str:
    """A checkpoint with no digest is read whole (tensors only, ``weights_only``) and every floating-point
    tensor of :data:`LEARNED_STATE` — weights, optimiser moments — must be finite; otherwise it is refused
    in one line."""
    why = "has no SHA-256 beside it"
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # truncated, empty, not a checkpoint
        reason = first_line(exc).split(". ")[0]
        raise DataError(f"cannot read checkpoint {path}: {reason} (and it {why} to check it by)") from None
    learned = {k: payload[k] for k in LEARNED_STATE if isinstance(payload, dict) and k in payload}
    if not learned:
        raise DataError(f"checkpoint {path} {why} and holds no model weights (not a poslab checkpoint); refusing it")
    bad = [name for name, tensor in _tensors(learned) if tensor.is_floating_point() and not tensor.isfinite().all()]
    if bad:
        more = f" and {len(bad) - 1} more" if len(bad) > 1 else ""
        raise DataError(f"checkpoint {path} {why} and holds non-finite values in {bad[0]}{more}; refusing it")
    return (f"poslab: warning: checkpoint {path} {why} (or an unreadable one): only its values were checked, "
            "finite, not its bytes")  # fmt: skip


def _tensors(value: Any, name: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted name, tensor) of every tensor in a nested checkpoint payload."""
    if isinstance(value, torch.Tensor):
        yield name or "<root>", value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _tensors(item, f"{name}.{key}" if name else str(key))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from _tensors(item, f"{name}[{index}]")
