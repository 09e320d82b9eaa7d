"""The toy modality's record: what it contributes to poslab (:class:`poslab.modalities.Modality`)."""

from __future__ import annotations

from poslab.config.schema import EvalConfig
from poslab.modalities import Modality

from .schema import ToyData, ToyModel, ToyTask

MODALITY = Modality(
    name="toy",
    task=ToyTask,
    data=ToyData,
    model=ToyModel,
    eval=EvalConfig,  # end-of-run probes would extend it (a length sweep, another resolution)
    # "module:attribute" references, imported when a run starts: composing a config imports no Lightning
    tasks={"order": f"{__package__}.task:ToyTaskModule"},
    datamodule=f"{__package__}.data:ToyDataModule",
    headline=("test/acc", "val/acc_best", "test/loss"),  # the report's table leads with these
    tiny=("data.size=64", "trainer.max_epochs=1"),  # a run of a few CPU seconds, for the registry-wide tests
)
