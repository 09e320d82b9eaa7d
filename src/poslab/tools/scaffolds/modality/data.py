"""The toy data: random digit sequences labelled by whether the first digit is larger than the last.

Order matters (a model blind to position cannot tell first from last), so encoders separate. The data is made
from the seed, so a run needs no download; a modality reading files would add ``data.root`` and sources.
"""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, TensorDataset

from poslab.data.base import PositionDataModule
from poslab.positions import Positions


class ToyDataModule(PositionDataModule):
    SPLITS = {"fit": 0, "validate": 1, "test": 2}  # a seed offset per split: three disjoint random sets

    def setup(self, stage: str | None = None) -> None:
        self.splits = {split: self._split(offset) for split, offset in self.SPLITS.items()}

    def _split(self, offset: int) -> TensorDataset:
        generator = torch.Generator().manual_seed(self.seed * 3 + offset)
        tokens = torch.randint(0, 10, (self.cfg.size, self.cfg.length), generator=generator)
        return TensorDataset(tokens, (tokens[:, 0] > tokens[:, -1]).long())

    def model_facts(self) -> dict:
        """Sizes the model takes from the data (its constructor's ``SUPPLIED`` options)."""
        return {"vocab": 10, "num_classes": 2}

    def context_options(self) -> dict:
        """What an encoder sized by the training context (a learned table) is built for."""
        return {"max_len": self.cfg.length}

    def similarity_positions(self) -> tuple[Positions, int, None]:
        """The positions ``poslab show`` and the similarity figure draw: one training sequence."""
        return Positions.consecutive(self.cfg.length), self.cfg.length, None

    def train_dataloader(self) -> DataLoader:
        return self.shuffled_loader(self.splits["fit"], self.cfg.batch_size)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.splits["validate"], batch_size=self.cfg.batch_size)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.splits["test"], batch_size=self.cfg.batch_size)

    def on_after_batch_transfer(self, batch, dataloader_idx: int) -> dict:
        return self.as_batch(batch)

    def as_batch(self, batch, training: bool = False) -> dict:
        """A loader's batch as the task reads it: tokens, labels and their positions (here: 0..L-1)."""
        tokens, labels = batch
        pos = Positions.consecutive(tokens.shape[1], device=tokens.device)  # made where the batch is: no copy
        return {"tokens": tokens, "label": labels, "pos": pos}
