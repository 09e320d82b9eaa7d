"""The data-module interface every modality implements.

The generic parts (train, eval, the callbacks every run shares) talk to a
modality's data only through these methods, so a new modality's data module
subclasses :class:`PositionDataModule` and fills them in. Positions are made
here, not in the model: a batch is a dict holding a
:class:`~poslab.positions.Positions` under ``"pos"``.
"""

from __future__ import annotations

from typing import Any

import lightning as L
from torch.utils.data import DataLoader, Dataset

from poslab.data.resumable import ResumableTraining
from poslab.positions import Positions


class PositionDataModule(ResumableTraining, L.LightningDataModule):
    """A Lightning data module whose training loader resumes with the checkpoint (:class:`ResumableTraining`).

    ``cfg`` is the run's ``data`` node; ``train_data`` the ``data`` node the
    model was trained with when a checkpoint is evaluated on other data (None
    when training), so the data can express positions in the training units.
    """

    def __init__(self, cfg: Any, seed: int = 0, train_data: Any = None) -> None:
        super().__init__()
        self.cfg = cfg
        self.seed = seed

    @classmethod
    def from_config(cls, cfg: Any, train_cfg: dict | None = None) -> PositionDataModule:
        """Build from the whole run config; override to read more than ``cfg.data`` (text reads ``eval.multiples``)."""
        return cls(cfg.data, seed=cfg.seed, train_data=train_cfg["data"] if train_cfg else None)

    def model_facts(self) -> dict[str, Any]:
        """What the task is sized by (classes, vocabulary…): the task's keyword arguments, saved with the checkpoint."""
        raise NotImplementedError

    def context_options(self) -> dict[str, Any]:
        """Encoder options the data knows (the training patch grid, the longest position): they fill options
        the config leaves null, so an encoder never needs to know where they come from."""
        return {}

    def similarity_positions(self) -> tuple[Positions, int, tuple[int, ...] | None]:
        """What the encoder figure at the start of a run draws: positions, how many tokens, and the grid
        they lie on (None for a sequence)."""
        raise NotImplementedError

    @staticmethod
    def eval_loader(dataset: Dataset, batch_size: int, num_workers: int, keep_workers: bool = False) -> DataLoader:
        """A validation or test loader. ``keep_workers`` (validation, every epoch) keeps its worker processes
        between passes; a test pass lets them go when done, or every probe's loader would hold its own until
        the run ends."""
        return DataLoader(
            dataset, batch_size=batch_size, num_workers=num_workers, persistent_workers=keep_workers and num_workers > 0
        )

    def as_batch(self, batch: Any, training: bool = False) -> dict[str, Any]:
        """A loader's raw item -> the task's batch dict (tensors plus ``"pos"``)."""
        return batch
