"""A DataLoader that a resumed run continues exactly where the killed one stopped.

Every random draw of the loader (shuffling, worker seeds) comes from its own
seeded generator, never the global RNG, and the loader remembers that
generator's state at the start of the epoch. Lightning saves the loader's
``state_dict`` with each checkpoint and hands it back before iterating again
(its stateful-loader support); the loader then restores the epoch's generator
state and skips the batches the killed run already trained on, so the resumed
run sees the same batches in the same order as an uninterrupted one. How many
batches training consumed is set by :class:`poslab.callbacks.TrainingPosition`
(the loader itself runs ahead: Lightning prefetches).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DataLoader


class ResumableLoader(DataLoader):
    """A ``DataLoader`` with its own seeded generator and a resumable position."""

    def __init__(self, *args: Any, seed: int = 0, **kwargs: Any) -> None:
        super().__init__(*args, generator=torch.Generator().manual_seed(seed), **kwargs)
        self.epoch_state = self.after_state = self.generator.get_state()
        self.done = 0  # batches of the current epoch that training has consumed
        self._skip = 0

    def __iter__(self):
        self.epoch_state = self.generator.get_state()
        iterator = super().__iter__()  # draws the epoch's order from the generator
        self.after_state = self.generator.get_state()
        self.done, skip, self._skip = self._skip, self._skip, 0
        for _ in range(skip):
            next(iterator)
        return iterator

    def state_dict(self) -> dict[str, Any]:
        return {"epoch_state": self.epoch_state, "after_state": self.after_state, "done": self.done}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a saved position: mid-epoch, the same order past the consumed batches;
        at an epoch's end, the next epoch's order."""
        try:
            finished = state["done"] >= len(self)
        except TypeError:  # an endless stream has no end of epoch
            finished = False
        if finished:
            self.generator.set_state(state["after_state"])
            self._skip = 0
        else:
            self.generator.set_state(state["epoch_state"])
            self._skip = state["done"]
