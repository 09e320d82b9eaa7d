"""Every registered data source of every modality loads a tiny generated copy of its files and gives batches.

A dataset a fork adds (``make new-dataset``) is covered here with no edit: its ``SAMPLES`` entry writes the
files its loader reads, and the modality's data module must turn them into finite training batches.
"""

from __future__ import annotations

import math

import pytest
import torch

from poslab.config.composition import compose
from poslab.data import build_datamodule
from poslab.data.sources import source_modules
from tests.conftest import tiny_overrides

CASES = [(m, name) for m, package in source_modules().items() for name in package.SOURCES]


def test_every_source_has_a_sample_writer():
    for modality, package in source_modules().items():
        missing = sorted(set(package.SOURCES) - set(package.SAMPLES))
        assert not missing, f"{modality} sources without a SAMPLES entry (a writer of a tiny copy): {missing}"
    assert len(CASES) >= 12


@pytest.mark.parametrize(("modality", "name"), CASES, ids=[f"{m}-{n}" for m, n in CASES])
def test_every_source_runs_on_a_tiny_generated_sample(modality, name, tmp_path, request, accept_any_checksum):
    root = tmp_path / "data"
    root.mkdir()
    reads_it = source_modules()[modality].SAMPLES[name](root)
    overrides = [o for o in tiny_overrides(request, modality) if not o.startswith(("data=", "data.path="))]
    overrides += [f"data={name}", f"data.root={root}", "data.download=false", *reads_it]
    datamodule = build_datamodule(compose(overrides))
    datamodule.prepare_data()  # would raise (no network) if it tried to download
    datamodule.setup("fit")
    batch = next(iter(datamodule.train_dataloader()))
    tensors = [v for v in (batch.values() if isinstance(batch, dict) else batch) if isinstance(v, torch.Tensor)]
    assert tensors and all(t.numel() > 0 for t in tensors)
    assert all(torch.isfinite(t.float()).all() for t in tensors)
    assert all(not isinstance(v, float) or math.isfinite(v) for v in datamodule.model_facts().values())
    assert not [p.name for p in root.rglob(".*")], "a load left a temporary file behind"
