"""Video: a space-time ViT classifying the motion (or the digit) of a moving MNIST digit.

Positions: the frame index (``steps``), the patch cell (``coords``) and both
(``coords3d``), so 1D, 2D and 3D encoders all fit. Built only as a plugin:
nothing outside this package and ``configs/modality/video.yaml`` names it.

Files: ``clips.py`` (the moving digits), ``data.py`` (the data module and its
positions), ``model.py`` (the space-time ViT), ``task.py`` (the classifier),
``callbacks.py`` (accuracy on longer clips and larger canvases),
``report.py`` (its report figure), ``show.py`` (what ``poslab show`` draws),
``schema.py`` (its config keys).
"""

from poslab.modalities import Modality, register_modality
from poslab.modalities.video.schema import (
    VideoDataConfig,
    VideoEvalConfig,
    VideoModelConfig,
    VideoTaskConfig,
    check_video,
)

MODALITY = register_modality(
    Modality(
        name="video",
        task=VideoTaskConfig,
        data=VideoDataConfig,
        model=VideoModelConfig,
        eval=VideoEvalConfig,
        check=check_video,
        tasks={"classification": "poslab.modalities.video.task:VideoClassifier"},
        datamodule="poslab.modalities.video.data:VideoDataModule",
        headline=("test/acc", "val/acc_best", "test/loss"),
        extra_prefixes=("temporal/acc@", "spatial/acc@"),
        report_figures="poslab.modalities.video.report:figures",
        overlays="poslab.modalities.video.report:overlays",
        show="poslab.modalities.video.show:canvas",
        shows=("coords3d",),  # `poslab show` draws an encoder reading coords3d here by default
    )
)
