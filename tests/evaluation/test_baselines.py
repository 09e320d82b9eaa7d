"""Baselines, exactly, on hand-made series."""

from __future__ import annotations

import torch

from poslab.modalities.timeseries.baselines import (
    fit_ridge,
    forecast_errors,
    predict_ridge,
    repeat_last,
    seasonal_naive,
)


def test_repeat_last_and_seasonal_naive_on_a_hand_made_series():
    past = torch.tensor([[1.0, 2, 3, 4, 5, 6]]).unsqueeze(-1)  # [1, 6, 1]
    assert repeat_last(past, 3)[0, :, 0].tolist() == [6, 6, 6]
    assert seasonal_naive(past, 3, period=2)[0, :, 0].tolist() == [5, 6, 5]  # the last season, repeated
    assert seasonal_naive(past, 4, period=4)[0, :, 0].tolist() == [3, 4, 5, 6]


def test_a_perfectly_seasonal_series_has_zero_seasonal_error():
    season = torch.tensor([0.0, 1.0, 4.0, 1.0])
    series = season.repeat(10)
    past = torch.stack([series[i : i + 8] for i in range(20)])[..., None]
    future = torch.stack([series[i + 8 : i + 12] for i in range(20)])[..., None]
    errors = forecast_errors(past, future, {"day": 4, "week": 16}, fit_ridge(past, future, ridge=1e-6))
    mse = {name: error.pow(2).mean().item() for name, error in errors.items()}
    assert mse["seasonal_naive_day"] == 0.0
    assert "seasonal_naive_week" not in mse  # a week is longer than the lookback
    assert mse["linear"] < 1e-6  # a linear map copies the season
    assert mse["repeat_last"] > 1.0
    assert all(error.shape == future.shape for error in errors.values())


def test_ridge_recovers_a_linear_map():
    torch.manual_seed(0)
    weights = torch.randn(6, 2)
    past = torch.randn(200, 6, 3)  # 3 channels share the map
    future = torch.einsum("nlc,lh->nhc", past, weights)
    fitted = fit_ridge(past, future, ridge=1e-8)
    torch.testing.assert_close(fitted.float(), weights, atol=1e-4, rtol=0)
    torch.testing.assert_close(predict_ridge(fitted, past), future, atol=1e-4, rtol=0)
