"""The template of ``poslab new modality NAME``: the smallest modality that trains, reports and compares.

``poslab new modality audio`` copies these files with ``toy`` / ``Toy`` renamed, into
``src/poslab/modalities/audio/`` with ``configs/modality/audio.yaml`` and ``tests/test_audio_modality.py``;
the copy's ``__init__.py`` registers its record. This template registers nothing (the tests register
:data:`~poslab.tools.scaffolds.modality.record.MODALITY` where they need it).

Files: ``schema.py`` (its ``task`` / ``data`` / ``model`` keys), ``data.py`` (the data module: data it makes
itself, and its positions), ``model.py`` (the network around poslab's backbone), ``task.py`` (the
LightningModule: loss and metrics), ``record.py`` (the :class:`~poslab.modalities.Modality` record),
``toy.yaml`` (its config: only values that differ from the declared defaults), ``test_toy.py`` (its tests).
"""
