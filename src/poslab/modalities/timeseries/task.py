"""Forecasting: MSE / MAE on the standardised scale (torchmetrics)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torchmetrics import MeanAbsoluteError, MeanSquaredError

from poslab.config.options import pick_options
from poslab.modalities.timeseries.model import Forecaster
from poslab.positions import Positions
from poslab.tasks.base import PositionTask


class ForecastTask(PositionTask):
    monitor = ("val/mse", "min")

    def __init__(
        self, cfg: dict[str, Any], lookback: int, horizon: int, channels: int, context: dict[str, Any]
    ) -> None:
        super().__init__(cfg)
        self.save_hyperparameters()
        encoder = self.build_encoder(context)
        options = pick_options(Forecaster, cfg["model"], Forecaster.SUPPLIED)
        self.model = Forecaster(encoder, lookback=lookback, horizon=horizon, **options)
        self.metrics = torch.nn.ModuleDict(
            {
                f"{stage}_{name}": cls()
                for stage in ("val", "test")
                for name, cls in (("mse", MeanSquaredError), ("mae", MeanAbsoluteError))
            }
        )

    def forward(self, past: torch.Tensor, pos_past: Positions, pos_future: Positions) -> torch.Tensor:
        return self.model(past, pos_past, pos_future)

    def training_step(self, batch, batch_idx):
        loss = F.mse_loss(self(batch["past"], batch["pos_past"], batch["pos_future"]), batch["future"])
        self.log("train/loss", loss, on_step=True, on_epoch=False, batch_size=batch["past"].shape[0])
        return loss

    def _eval_step(self, batch, stage: str) -> None:
        pred = self(batch["past"], batch["pos_past"], batch["pos_future"])
        for name in ("mse", "mae"):
            metric = self.metrics[f"{stage}_{name}"]
            metric(pred, batch["future"])
            self.log(f"{stage}/{name}", metric, on_step=False, on_epoch=True, prog_bar=name == "mse")

    def validation_step(self, batch, batch_idx):
        self._eval_step(batch, "val")

    def test_step(self, batch, batch_idx):
        self._eval_step(batch, "test")

    def forecast_error(self, batch) -> torch.Tensor:
        """Forecast minus target, ``[B, H, C]`` (a probe's measures square it or take its size)."""
        return self(batch["past"], batch["pos_past"], batch["pos_future"]).float() - batch["future"]

    def evaluations(self, cfg) -> list:
        from poslab.modalities.timeseries.callbacks import ForecastReport  # deferred: Lightning and matplotlib, ~7 s

        return [ForecastReport(cfg.eval)]
