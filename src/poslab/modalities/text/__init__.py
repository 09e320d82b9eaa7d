"""Text: a small causal transformer on characters (and synthetic sequence tasks); positions are step indices.

Files: ``sources/`` (corpora), ``data.py`` (the corpus data module),
``sequence_tasks.py`` / ``sequence.py`` (copy, reverse, associative recall and
their data module), ``model.py`` (the causal LM), ``task.py`` /
``sequence_task.py`` (the tasks), ``lengen.py`` + ``callbacks.py`` (the length
study), ``report.py`` (its report tables and figures), ``show.py`` (what
``poslab show`` draws), ``benchmark.py`` (the training step ``make bench`` times), ``schema.py``
(its config keys). Config: ``configs/modality/text.yaml``.
"""

from poslab.modalities import Modality, register_modality
from poslab.modalities.text.schema import (
    LMTaskConfig,
    TextDataConfig,
    TextEvalConfig,
    TextModelConfig,
    check_text,
)
from poslab.modalities.text.sequence_tasks import TASKS as SEQUENCE_TASKS

MODALITY = register_modality(
    Modality(
        name="text",
        task=LMTaskConfig,
        data=TextDataConfig,
        model=TextModelConfig,
        eval=TextEvalConfig,
        check=check_text,
        tasks={
            "lm": "poslab.modalities.text.task:LanguageModel",
            "sequence": "poslab.modalities.text.sequence_task:SequenceTask",
        },
        datamodule="poslab.modalities.text.data:TextDataModule",
        datamodules={name: "poslab.modalities.text.sequence:SequenceDataModule" for name in SEQUENCE_TASKS},
        headline=(
            "val/loss",
            "test/loss",
            "test/acc",
            "lengen/loss@1x",
            "lengen/loss@2x",
            "lengen/loss@4x",
            "lengen/loss@8x",
            "lengen/acc@1x",
            "lengen/acc@8x",
        ),
        report_tables="poslab.modalities.text.report:tables",
        report_figures="poslab.modalities.text.report:figures",
        overlays="poslab.modalities.text.report:overlays",
        show="poslab.modalities.text.show:canvas",
        training_step="poslab.modalities.text.benchmark:training_step",
        shows=("steps",),  # `poslab show` draws an encoder reading steps here by default
    )
)
