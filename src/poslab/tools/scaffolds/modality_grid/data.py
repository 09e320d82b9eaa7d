"""The toy data: random grids of digits labelled by whether the top-left digit is larger than the bottom-right.

Where a cell sits matters (a model blind to position cannot tell the two corners apart), so encoders separate.
A grid is a sequence of cells read row by row, each at its (row, col): ``Positions.coords`` on a known grid,
which 2D encoders (``sincos2d``, ``rope2d``, ``liere`` …) read. The data is made from the seed, so a run needs
no download; a modality reading files would add ``data.root`` and sources.
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

    @property
    def grid(self) -> tuple[int, int]:
        return (self.cfg.rows, self.cfg.cols)

    def _split(self, offset: int) -> TensorDataset:
        generator = torch.Generator().manual_seed(self.seed * 3 + offset)
        cells = torch.randint(0, 10, (self.cfg.size, *self.grid), generator=generator)
        labels = (cells[:, 0, 0] > cells[:, -1, -1]).long()
        return TensorDataset(cells.flatten(1), labels)  # row by row: cell (r, c) is token r * cols + c

    def positions(self, device: torch.device | str | None = None) -> Positions:
        """Each token's (row, col), the integer cells of the grid (a fact 2D encoders read for free), made on
        ``device`` (the batch's: no copy from the host each step)."""
        rows, cols = (torch.arange(n, device=device) for n in self.grid)
        coords = torch.stack(torch.meshgrid(rows, cols, indexing="ij"), dim=-1)
        return Positions(coords=coords.reshape(-1, 2).float(), coords_grid=self.grid)

    def model_facts(self) -> dict:
        """Sizes the model takes from the data (its constructor's ``SUPPLIED`` options)."""
        return {"vocab": 10, "num_classes": 2}

    def context_options(self) -> dict:
        """What an encoder sized by the training grid (a learned 2D table) is built for."""
        return {"grid_size": self.grid}

    def similarity_positions(self) -> tuple[Positions, int, tuple[int, int]]:
        """The positions ``poslab show`` and the similarity figure draw: the grid, drawn as a grid."""
        return self.positions(), self.cfg.rows * self.cfg.cols, self.grid

    def train_dataloader(self) -> DataLoader:
        return self.shuffled_loader(self.splits["fit"], self.cfg.batch_size)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.splits["validate"], batch_size=self.cfg.batch_size)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.splits["test"], batch_size=self.cfg.batch_size)

    def on_after_batch_transfer(self, batch, dataloader_idx: int) -> dict:
        return self.as_batch(batch)

    def as_batch(self, batch, training: bool = False) -> dict:
        """A loader's batch as the task reads it: tokens, labels and their positions (the grid's cells)."""
        tokens, labels = batch
        return {"tokens": tokens, "label": labels, "pos": self.positions(tokens.device)}
