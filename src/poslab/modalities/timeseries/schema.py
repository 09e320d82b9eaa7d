"""The time-series config schema: every ``task`` / ``data`` / ``eval`` option with its type and default.

An option is declared once, here (``model.*``: in the forecaster's
constructor); ``configs/modality/timeseries.yaml`` and experiments set other
values, and validation and ``poslab train --options`` derive from these
declarations. Each range is declared at its field (``Annotated[int, AT_LEAST_1]``, :mod:`poslab.config.ranges`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal, Optional

from poslab.config.options import options_schema
from poslab.config.ranges import AT_LEAST_0, AT_LEAST_1, FRACTION
from poslab.config.schema import EvalConfig, ModelConfig
from poslab.modalities.timeseries.model import Forecaster
from poslab.modalities.timeseries.sources import SOURCES


@dataclass
class TimeseriesDataConfig:
    name: Literal[tuple(SOURCES)] = "taylor"  # type: ignore[valid-type]  # taylor is embedded: no network
    root: str = "data"  # download cache; data.root=../shared/data finds a pre-filled one
    path: Optional[str] = None  # data=csvfile: your CSV (a date column + numeric columns; 70 / 10 / 20 % split)
    lookback: Annotated[int, AT_LEAST_1] = 336  # past steps L (Taylor: one week of half hours)
    horizon: Annotated[int, AT_LEAST_1] = 48  # future steps H (one day)
    features: Literal["multivariate", "univariate"] = "multivariate"  # all columns | the target (OT for ETT)
    batch_size: Annotated[int, AT_LEAST_1] = 64
    eval_batch_size: Annotated[int, AT_LEAST_1] = 256
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

    ridge: Annotated[float, AT_LEAST_0] = 1.0  # the linear baseline's ridge penalty
    irregular_drop: Annotated[float, FRACTION] = 0.2  # fraction of past steps the irregular-sampling probe drops
