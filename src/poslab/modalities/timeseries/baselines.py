"""Forecasting baselines every model must beat, on the same windows.

* repeat-last: the last observed value for every future step;
* seasonal naive: the value one season (a day, a week) before,
  ŷ_{T+h} = y_{T+h−m·(⌊(h−1)/m⌋+1)};
* linear: a ridge regression from the lookback window to the horizon, fitted
  in closed form on the training windows, shared by all channels, no
  intercept (inputs are standardised). Zeng et al. 2023 ("Are Transformers
  Effective for Time Series Forecasting?") showed such linear maps beat many
  transformers on these benchmarks.
"""

from __future__ import annotations

import torch


def repeat_last(past: torch.Tensor, horizon: int) -> torch.Tensor:
    """``past [N, L, C]`` -> ``[N, H, C]``."""
    return past[:, -1:].expand(-1, horizon, -1)


def seasonal_naive(past: torch.Tensor, horizon: int, period: int) -> torch.Tensor:
    if past.shape[1] < period:
        raise ValueError(f"lookback {past.shape[1]} is shorter than the season of {period} steps")
    index = past.shape[1] - period + torch.arange(horizon) % period
    return past[:, index]


def fit_ridge(past: torch.Tensor, future: torch.Tensor, ridge: float) -> torch.Tensor:
    """``W [L, H]`` minimising ‖XW − Y‖² + ridge·‖W‖², channels as extra samples (float64)."""
    x = past.permute(0, 2, 1).reshape(-1, past.shape[1]).double()
    y = future.permute(0, 2, 1).reshape(-1, future.shape[1]).double()
    gram = x.T @ x + ridge * torch.eye(x.shape[1], dtype=torch.float64)
    return torch.linalg.solve(gram, x.T @ y)


def predict_ridge(weights: torch.Tensor, past: torch.Tensor) -> torch.Tensor:
    batch, _, channels = past.shape
    x = past.permute(0, 2, 1).reshape(batch * channels, -1).double()
    return (x @ weights).float().reshape(batch, channels, -1).permute(0, 2, 1)


def forecast_errors(
    past: torch.Tensor, future: torch.Tensor, seasons: dict[str, int], ridge_weights: torch.Tensor
) -> dict[str, torch.Tensor]:
    """name -> each baseline's forecast minus ``future`` (``[N, H, C]``); a seasonal baseline whose season
    exceeds the lookback is left out. ``ridge_weights``: :func:`fit_ridge` on the training windows."""
    horizon = future.shape[1]
    out = {"repeat_last": repeat_last(past, horizon) - future}
    for name, period in seasons.items():
        if past.shape[1] >= period:
            out[f"seasonal_naive_{name}"] = seasonal_naive(past, horizon, period) - future
    out["linear"] = predict_ridge(ridge_weights.to(past.device), past) - future
    return out


def stack_windows(dataset) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(past [N, L, C], future [N, H, C], future times [N, H]) of a window dataset."""
    items = [dataset[i] for i in range(len(dataset))]
    return (
        torch.stack([i[0] for i in items]),
        torch.stack([i[1] for i in items]),
        torch.stack([i[3] for i in items]),
    )
