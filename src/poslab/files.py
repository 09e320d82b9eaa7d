"""Files written whole or not at all, readable by every user of a shared machine, and their SHA-256.

Run directories, data caches, summaries and checkpoints all go through here: a reader sees the old bytes or
the new, never half of them, and a kill mid-write leaves no partial file behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any


def shareable(fd: int) -> None:
    """Give a file made by ``tempfile.mkstemp`` (mode 0600) the mode a plain ``open`` gives (0666 less the
    umask): data caches and summaries are read by other users of a shared machine."""
    os.fchmod(fd, 0o666 & ~umask())


def umask() -> int:
    """This process's umask (reading it means setting it: set back at once)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path: Path, data: bytes) -> None:
    """``path`` replaced atomically: a reader sees the old bytes or the new, never half of them."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    shareable(fd)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except OSError as exc:  # a write names no file (``[Errno 28] No space left on device``): name the one meant
        Path(tmp).unlink(missing_ok=True)
        if exc.filename is not None and exc.filename != tmp:
            raise
        raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, text.encode())
    return path


def cache_folder() -> Path:
    """poslab's cache: ``$POSLAB_CACHE``, else ``$XDG_CACHE_HOME/poslab`` (``~/.cache/poslab``)."""
    home = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(os.environ.get("POSLAB_CACHE") or Path(home) / "poslab")


def write_json_atomic(path: Path, payload: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, (json.dumps(payload, indent=2, sort_keys=False, default=_jsonable) + "\n").encode())
    return path


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
