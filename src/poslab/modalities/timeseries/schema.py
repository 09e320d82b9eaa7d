"""The time-series config schema: every ``task`` / ``data`` / ``eval`` option with its type and default.

An option is declared once, here (``model.*``: in the forecaster's
constructor); ``configs/modality/timeseries.yaml`` and experiments set other
values, and validation and ``poslab train --options`` derive from these
declarations. Value ranges by dotted key in :data:`RANGES`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

from poslab.modalities.timeseries.model import Forecaster
from poslab.modalities.timeseries.sources import SOURCES
from poslab.options import options_schema
from poslab.schema import AT_LEAST_0, AT_LEAST_1, FRACTION, EvalConfig, ModelConfig

RANGES = {
    "model.patch_len": AT_LEAST_1,
    "model.stride": AT_LEAST_1,
    "data.lookback": AT_LEAST_1,
    "data.horizon": AT_LEAST_1,
    "eval.ridge": AT_LEAST_0,  # a negative penalty is no ridge (and can make the solve singular)
    "eval.irregular_drop": FRACTION,
}


@dataclass
class TimeseriesDataConfig:
    name: Literal[tuple(SOURCES)] = "taylor"  # type: ignore[valid-type]  # taylor is embedded: no network
    root: str = "data"  # download cache; data.root=../shared/data finds a pre-filled one
    path: Optional[str] = None  # data=csvfile: your CSV (a date column + numeric columns; 70 / 10 / 20 % split)
    lookback: int = 336  # past steps L (Taylor: one week of half hours)
    horizon: int = 48  # future steps H (one day)
    features: Literal["multivariate", "univariate"] = "multivariate"  # all columns | the target (OT for ETT)
    batch_size: int = 64
    eval_batch_size: int = 256
    download: bool = True


#: ``model.*``: the forecaster's keyword options, typed and defaulted by its constructor (``highway`` null:
#: on for the step / patch layouts, off for query).
ForecasterConfig = options_schema("ForecasterConfig", Forecaster, Forecaster.SUPPLIED, bases=(ModelConfig,))


@dataclass
class ForecastTaskConfig:
    name: Literal["forecast"] = "forecast"


@dataclass
class TimeseriesEvalConfig(EvalConfig):
    """Baselines and probes at the end of a forecasting run."""

    ridge: float = 1.0  # the linear baseline's ridge penalty
    irregular_drop: float = 0.2  # fraction of past steps the irregular-sampling probe drops
