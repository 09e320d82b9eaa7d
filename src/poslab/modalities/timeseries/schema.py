"""The time-series config schema: the keys of ``task`` / ``data`` / ``model`` / ``eval`` and their types.

Values live in ``configs/modality/timeseries.yaml``; value ranges by dotted key in :data:`RANGES`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

from omegaconf import MISSING

from poslab.modalities.timeseries.model import Forecaster
from poslab.modalities.timeseries.sources import SOURCES
from poslab.options import options_schema
from poslab.schema import AT_LEAST_1, EvalConfig, ModelConfig

RANGES = {
    "model.patch_len": AT_LEAST_1,
    "model.stride": AT_LEAST_1,
    "data.lookback": AT_LEAST_1,
    "data.horizon": AT_LEAST_1,
}


@dataclass
class TimeseriesDataConfig:
    name: Literal[tuple(SOURCES)] = MISSING  # type: ignore[valid-type]
    root: str = MISSING
    path: Optional[str] = MISSING
    lookback: int = MISSING
    horizon: int = MISSING
    features: Literal["multivariate", "univariate"] = MISSING
    batch_size: int = MISSING
    eval_batch_size: int = MISSING
    download: bool = MISSING


#: ``model.*``: the forecaster's keyword options, typed and defaulted by its constructor (``highway`` null:
#: on for the step / patch layouts, off for query).
ForecasterConfig = options_schema("ForecasterConfig", Forecaster, Forecaster.SUPPLIED, bases=(ModelConfig,))


@dataclass
class ForecastTaskConfig:
    name: Literal["forecast"] = MISSING


@dataclass
class TimeseriesEvalConfig(EvalConfig):
    """Baselines and probes at the end of a forecasting run."""

    ridge: float = MISSING  # the linear baseline's ridge penalty
    irregular_drop: float = MISSING  # fraction of past steps the irregular-sampling probe drops
