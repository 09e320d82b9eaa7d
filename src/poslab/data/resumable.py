"""Training data that a resumed run continues exactly where the killed one stopped.

* :class:`ResumableLoader` remembers the RNG state its epoch's order was drawn
  from (its own seeded generator, or the global RNG when it has none) and can
  redraw that order and skip the batches already trained on.
* :class:`ResumableTraining`, mixed into a data module, builds the shuffled
  training loader (each DDP process its own shard, through a
  ``DistributedSampler`` the loader owns, so Lightning never swaps the loader
  for a copy that would not know its position), saves the loader's position
  with every checkpoint (Lightning stores a data module's ``state_dict``) and
  hands it to the first training loader of a resumed run.
  Lightning restores data modules before it builds any loader; it would restore
  a stateful loader itself only after ``trainer.estimated_stepping_batches``
  (which the optimiser's schedule reads) has already built and started it.

How many batches training consumed is set by
:class:`poslab.run.callbacks.TrainingPosition` (the loader itself runs ahead:
Lightning prefetches); the global RNG state of the step is restored there too.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler


class ResumableLoader(DataLoader):
    """A training ``DataLoader`` whose position in the epoch can be saved and restored.

    ``seed``: the loader's own generator (its order then ignores the global
    RNG); None: the global RNG, as a plain shuffled ``DataLoader`` draws it.
    A resumed run restores the global RNG before the loader is built (see
    :class:`poslab.run.callbacks.TrainingPosition`), so restoring the position
    leaves it as it found it.
    """

    def __init__(self, *args: Any, seed: int | None = None, **kwargs: Any) -> None:
        generator = None if seed is None else torch.Generator().manual_seed(seed)
        super().__init__(*args, generator=generator, **kwargs)
        self.done = 0  # batches of the current epoch that training has consumed (see consumed)
        self._epoch_over = False
        self._epoch_state = self._rng_state()
        self._resume: dict[str, Any] | None = None

    def _rng_state(self) -> torch.Tensor:
        return torch.get_rng_state() if self.generator is None else self.generator.get_state()

    def _set_rng_state(self, state: torch.Tensor) -> None:
        (torch.set_rng_state if self.generator is None else self.generator.set_state)(state)

    def __iter__(self):
        position, self._resume = self._resume, None
        if position is None:
            self._epoch_state, self.done, self._epoch_over = self._rng_state(), 0, False
            return super().__iter__()
        # redraw the epoch's order from the state it was drawn from and skip what was trained on; mid-epoch,
        # the global RNG then goes back to where the run had left it (the steps drew from it after the order)
        now = self._rng_state()
        self._set_rng_state(position["epoch_state"])
        self._epoch_state, self.done, self._epoch_over = position["epoch_state"], position["done"], False
        iterator = super().__iter__()
        for _ in range(position["done"]):
            next(iterator)
        if self.generator is None and position["done"]:
            self._set_rng_state(now)
        return iterator

    def consumed(self, batches: int, epoch_over: bool) -> None:
        """Training has used ``batches`` of this epoch; ``epoch_over``: the loop ends the epoch there
        (its batch limit may be shorter than the loader)."""
        self.done, self._epoch_over = batches, epoch_over

    def position(self) -> dict[str, Any]:
        """Where training is: the RNG state the epoch's order came (or comes) from, and the batches consumed.

        After an epoch's last batch, the next epoch draws from the state the loader holds now.
        """
        if self._epoch_over:
            return {"epoch_state": self._rng_state(), "done": 0}
        return {"epoch_state": self._epoch_state, "done": self.done}

    def resume_from(self, position: dict[str, Any]) -> None:
        """Start the next iteration at ``position`` (from :meth:`position`)."""
        self._resume = position


class ResumableTraining:
    """Data-module mixin: the training loader's position travels with the checkpoint."""

    _train_loader: ResumableLoader | None = None
    _resume_position: dict[str, Any] | None = None

    def shuffled_loader(self, dataset: Dataset, batch_size: int, seed: int | None = None, **kwargs) -> ResumableLoader:
        """The training loader over a map-style ``dataset``, registered (see :meth:`resumable`).

        One process: shuffled by ``seed``'s own generator, or by the global RNG when None. Several (DDP):
        a ``DistributedSampler`` gives each rank a disjoint shard, reshuffled per epoch from the run's seed.
        """
        trainer = getattr(self, "trainer", None)
        world = trainer.world_size if trainer is not None else 1
        if world > 1:
            run_seed = getattr(self, "seed", 0) if seed is None else seed
            sampler = DistributedSampler(dataset, num_replicas=world, rank=trainer.global_rank, seed=run_seed)
            return self.resumable(ResumableLoader(dataset, batch_size=batch_size, sampler=sampler, **kwargs))
        return self.resumable(ResumableLoader(dataset, batch_size=batch_size, shuffle=True, seed=seed, **kwargs))

    def resumable(self, loader: ResumableLoader) -> ResumableLoader:
        """Register the training loader (call in ``train_dataloader``); a resumed run's first one continues."""
        if self._resume_position is not None:
            loader.resume_from(self._resume_position)
            self._resume_position = None
        self._train_loader = loader
        return loader

    def state_dict(self) -> dict[str, Any]:
        return {} if self._train_loader is None else {"train_position": self._train_loader.position()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._resume_position = state_dict.get("train_position")
