"""Forecasting: MSE / MAE on the standardised scale (torchmetrics)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torchmetrics import MeanAbsoluteError, MeanSquaredError

from poslab.nn.forecaster import Forecaster
from poslab.positions import Positions
from poslab.tasks.base import PositionTask


class ForecastTask(PositionTask):
    monitor = ("val/mse", "min")

    def __init__(
        self, cfg: dict[str, Any], lookback: int, horizon: int, channels: int, context: dict[str, Any]
    ) -> None:
        super().__init__(cfg)
        self.save_hyperparameters()
        model_cfg = cfg["model"]
        encoder = self.build_encoder(context)
        self.model = Forecaster(
            encoder,
            layout=model_cfg["layout"],
            lookback=lookback,
            horizon=horizon,
            dim=model_cfg["dim"],
            depth=model_cfg["depth"],
            num_heads=model_cfg["num_heads"],
            mlp_ratio=model_cfg["mlp_ratio"],
            dropout=model_cfg["dropout"],
            patch_len=model_cfg["patch_len"],
            stride=model_cfg["stride"],
            revin=model_cfg["revin"],
            highway=model_cfg["highway"],
        )
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

    @torch.no_grad()
    def predict_windows(self, batches) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(forecast, target, future timestamps) over an iterable of batches, in eval mode."""
        was_training = self.training
        self.eval()
        preds, targets, times = [], [], []
        for batch in batches:
            batch = {k: v.to(self.device) for k, v in batch.items()}  # tensors and Positions
            preds.append(self(batch["past"], batch["pos_past"], batch["pos_future"]).cpu())
            targets.append(batch["future"].cpu())
            times.append(batch["pos_future"].times.cpu())
        self.train(was_training)
        return torch.cat(preds), torch.cat(targets), torch.cat(times)

    def report_callbacks(self, cfg) -> list:
        from poslab.callbacks import ForecastReport

        return [ForecastReport(cfg.eval)]
