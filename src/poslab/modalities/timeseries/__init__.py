"""Time series: a forecaster over past values; positions are step indices and timestamps.

Files: ``sources/`` (datasets), ``data.py`` (windows and their timestamps),
``model.py`` (the forecaster's layouts), ``task.py`` (the forecasting task),
``baselines.py`` / ``probes.py`` + ``callbacks.py`` (baselines, error by
horizon and weekday x hour, the irregular-sampling probe), ``report.py`` (its
report figures), ``protocol.py`` + ``published.csv`` (the long-term benchmark's
table beside the published one), ``show.py`` (what ``poslab show`` draws),
``schema.py`` (its config keys). Config: ``configs/modality/timeseries.yaml``.
"""

from poslab.modalities import Modality, register_modality
from poslab.modalities.timeseries.schema import (
    ForecasterConfig,
    ForecastTaskConfig,
    TimeseriesDataConfig,
    TimeseriesEvalConfig,
)

MODALITY = register_modality(
    Modality(
        name="timeseries",
        task=ForecastTaskConfig,
        data=TimeseriesDataConfig,
        model=ForecasterConfig,
        eval=TimeseriesEvalConfig,
        tasks={"forecast": "poslab.modalities.timeseries.task:ForecastTask"},
        datamodule="poslab.modalities.timeseries.data:TimeSeriesDataModule",
        headline=(
            "test/mse",
            "test/mae",
            "baseline/linear_mse",
            "baseline/seasonal_naive_week_mse",
            "probe/irregular_mse",
            "extrap/mse@2xH",
            "extrap/mse@2xL",
        ),
        report_tables="poslab.modalities.timeseries.protocol:tables",
        report_data="poslab.modalities.timeseries.protocol:data",
        report_figures="poslab.modalities.timeseries.report:figures",
        overlays="poslab.modalities.timeseries.report:overlays",
        show="poslab.modalities.timeseries.show:canvas",
        shows=("times",),  # `poslab show` draws an encoder reading times here by default
    )
)
