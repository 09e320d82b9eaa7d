"""Time-series data module: windows of ``lookback`` -> ``horizon`` steps with their timestamps.

Values are standardised per channel with the training split's mean and std
(every metric is on that scale). Every window carries its positions: step
indices (past 0..L−1, future L..L+H−1) and Unix timestamps in seconds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from poslab.data.base import PositionDataModule
from poslab.errors import ConfigError
from poslab.modalities.timeseries.sources import SOURCES, Series
from poslab.positions import Positions

SPLITS = ("train", "val", "test")


class ForecastWindows(Dataset):
    """All windows whose targets lie in ``[first_target, end)``."""

    def __init__(
        self, values: torch.Tensor, times: torch.Tensor, lookback: int, horizon: int, first_target: int, end: int
    ):
        self.values, self.times, self.lookback, self.horizon = values, times, lookback, horizon
        self.start = first_target - lookback
        if self.start < 0:
            raise ConfigError(f"data.lookback={lookback} reaches before the start of the series")
        self.count = max(0, end - horizon - first_target + 1)

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, i: int):
        s = self.start + i
        mid, end = s + self.lookback, s + self.lookback + self.horizon
        return self.values[s:mid], self.values[mid:end], self.times[s:mid], self.times[mid:end]


def seasonal_steps(step_seconds: int) -> dict[str, int]:
    """Steps in a day and in a week at this sampling rate."""
    return {"day": 86_400 // step_seconds, "week": 604_800 // step_seconds}


class TimeSeriesDataModule(PositionDataModule):
    def __init__(self, cfg: Any, seed: int = 0, train_data: Any = None) -> None:
        super().__init__(cfg, seed, train_data)
        self.lookback, self.horizon = int(cfg.lookback), int(cfg.horizon)
        self.series: Series | None = None
        self.values: torch.Tensor | None = None
        self.mean = self.std = None

    # -- facts -------------------------------------------------------------------------------------
    @property
    def channels(self) -> int:
        return self.values.shape[1]

    @property
    def step_seconds(self) -> int:
        return self.series.step_seconds

    def model_facts(self) -> dict[str, Any]:
        return {"lookback": self.lookback, "horizon": self.horizon, "channels": self.channels}

    def context_options(self) -> dict[str, Any]:
        return {"max_len": self.lookback + self.horizon, "step_seconds": self.step_seconds}

    def similarity_positions(self) -> tuple[Positions, int, None]:
        times = self.times[: self.lookback]
        return Positions.consecutive(self.lookback, times=times), self.lookback, None

    # -- Lightning hooks -----------------------------------------------------------------------------
    def prepare_data(self) -> None:
        SOURCES[self.cfg.name](Path(self.cfg.root), self.cfg.download, self.cfg.path)

    def setup(self, stage: str | None = None) -> None:
        if self.series is not None:
            return
        series = SOURCES[self.cfg.name](Path(self.cfg.root), False, self.cfg.path)
        values = series.values
        if self.cfg.features == "univariate":
            values = values[:, -1:]  # the target column (OT for ETT) is last
        train_end = series.borders[0]
        self.mean = values[:train_end].mean(axis=0)
        self.std = values[:train_end].std(axis=0)
        self.series = series
        self.values = torch.from_numpy(((values - self.mean) / self.std).astype(np.float32))
        self.times = torch.from_numpy(series.times)
        for split in SPLITS:
            if len(self.windows(split)) < 1:
                first, end = self.split_range(split)
                raise ConfigError(
                    f"data.lookback={self.lookback} + data.horizon={self.horizon} leave no {split} window in "
                    f"{self.cfg.path or self.cfg.name} ({len(values)} rows; {split} targets are rows {first}-{end})"
                )

    def split_range(self, split: str) -> tuple[int, int]:
        """(first target index, end) of a split."""
        borders = self.series.borders
        first = {"train": self.lookback, "val": borders[0], "test": borders[1]}[split]
        return first, borders[SPLITS.index(split)]

    def windows(self, split: str, lookback: int | None = None, horizon: int | None = None) -> ForecastWindows:
        first, end = self.split_range(split)
        lookback = lookback or self.lookback
        if split == "train":
            first = lookback
        return ForecastWindows(self.values, self.times, lookback, horizon or self.horizon, first, end)

    def loader(self, split: str, lookback: int | None = None, horizon: int | None = None) -> DataLoader:
        """Windows of a split in order (evaluation, probes)."""
        return DataLoader(self.windows(split, lookback, horizon), batch_size=self.cfg.eval_batch_size)

    def train_dataloader(self) -> DataLoader:
        windows = self.windows("train")
        return self.shuffled_loader(windows, self.cfg.batch_size, seed=self.seed)

    def val_dataloader(self) -> DataLoader:
        return self.loader("val")

    def test_dataloader(self) -> DataLoader:
        return self.loader("test")

    def on_after_batch_transfer(self, batch, dataloader_idx: int) -> dict[str, Any]:
        return self.as_batch(batch)

    @staticmethod
    def as_batch(batch) -> dict[str, Any]:
        past, future, t_past, t_future = batch
        lookback, horizon = past.shape[1], future.shape[1]
        steps = torch.arange(lookback + horizon, device=past.device)
        return {
            "past": past,
            "future": future,
            "pos_past": Positions(steps=steps[:lookback], times=t_past, steps_start=0, steps_end=lookback),
            "pos_future": Positions(
                steps=steps[lookback:], times=t_future, steps_start=lookback, steps_end=lookback + horizon
            ),
        }
