"""Vision: a small ViT classifying images; positions are (row, col) patch coordinates.

Files: ``sources/`` (datasets), ``data.py`` (the data module), ``model.py``
(the ViT), ``task.py`` (the classifier), ``callbacks.py`` (accuracy at other
image sizes), ``report.py`` (its report figures), ``show.py`` (what ``poslab
show`` draws), ``schema.py`` (its config keys). Config: ``configs/modality/vision.yaml``.
"""

from poslab.modalities import Modality, register_modality
from poslab.modalities.vision.schema import (
    ClassificationTaskConfig,
    VisionDataConfig,
    VisionEvalConfig,
    ViTConfig,
)

MODALITY = register_modality(
    Modality(
        name="vision",
        task=ClassificationTaskConfig,
        data=VisionDataConfig,
        model=ViTConfig,
        eval=VisionEvalConfig,
        tasks={"classification": "poslab.modalities.vision.task:ImageClassifier"},
        datamodule="poslab.modalities.vision.data:VisionDataModule",
        headline=("test/acc", "val/acc_best", "test/loss"),
        extra_prefixes=("resolution/acc@",),
        report_figures="poslab.modalities.vision.report:figures",
        report_tables="poslab.modalities.vision.published:tables",
        overlays="poslab.modalities.vision.report:overlays",
        show="poslab.modalities.vision.show:canvas",
        shows=("coords",),  # `poslab show` draws an encoder reading coords here by default
    )
)
