"""A dataset of ``(file, label)`` pairs read in the data loader's worker processes, when a batch needs them.

Decoding in workers is what lets a set larger than memory train (images, videos). A file that cannot be read
is one line naming it and the cause; with ``skip_unreadable`` (opt-in, for a large set with a few broken
files) it is a warning naming it and counting them, and the next file takes its place with its own label.
"""

from __future__ import annotations

import warnings
from typing import Any

from torch.utils.data import Dataset

from poslab.errors import DataError


class LabelledFiles(Dataset):
    """``(read(file), label)`` per item; a subclass says how a file is read (``read`` raises ``DataError``)."""

    kind = "file"  # what a file holds, as the messages name it

    def __init__(self, items: list[tuple[str, int]], skip_unreadable: bool = False) -> None:
        self.items = items
        self.skip_unreadable, self.skipped = skip_unreadable, 0  # each loader process counts its own

    def read(self, path: str) -> Any:
        raise NotImplementedError

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> tuple[Any, int]:
        for step in range(len(self.items)):  # skipping: the next readable file takes the place, with its label
            path, label = self.items[(i + step) % len(self.items)]
            try:
                return self.read(path), label
            except DataError as exc:
                if not self.skip_unreadable:
                    raise
                self.skipped += 1
                warnings.warn(f"{exc}; skipped (data.skip_unreadable), {self.skipped} so far in this loader "
                              "process", stacklevel=2)  # fmt: skip
        raise DataError(f"no readable {self.kind} among the {len(self.items)} of this split")
