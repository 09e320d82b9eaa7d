"""Probes as Lightning test passes: exact means, bucket means, the model variant a pass runs with, notes."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import lightning as L
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

from poslab.errors import PoslabError
from poslab.evaluation.probes import Buckets, Probe, distributed, run_probe


class Scaled(nn.Module):
    """``x -> factor * x``; a pass's variant changes the factor."""

    def __init__(self) -> None:
        super().__init__()
        self.factor = 1.0

    def forward(self, x):
        return self.factor * x


@contextlib.contextmanager
def factor(model: Scaled, value: float):
    old, model.factor = model.factor, value
    try:
        yield
    finally:
        model.factor = old


def trainer() -> L.Trainer:
    return L.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                     enable_model_summary=False, enable_checkpointing=False)  # fmt: skip


VALUES = torch.arange(1.0, 8.0)  # 7 items, in batches of 3, 3, 1


def test_a_pass_logs_the_mean_over_every_item_not_over_batches():
    model = Scaled()
    probe = Probe("x/{}@1", DataLoader(VALUES, batch_size=3), lambda b: {"value": model(b)})
    result = run_probe(trainer(), model, probe)
    assert result.metrics == {"x/value@1": pytest.approx(4.0)}  # (1+…+7)/7; the batch means' mean is 4.5
    assert result.note is None


def test_a_pass_runs_with_its_variant_and_the_model_is_restored_after():
    model = Scaled()
    probe = Probe("x/{}", DataLoader(VALUES, batch_size=3), lambda b: {"value": model(b)},
                  variant=lambda: factor(model, 10.0))  # fmt: skip
    assert run_probe(trainer(), model, probe).metrics["x/value"] == pytest.approx(40.0)
    assert model.factor == 1.0


def test_as_batch_prepares_what_measure_reads_and_buckets_average_per_bucket():
    model = Scaled()
    probe = Probe(
        "x/{}",
        DataLoader(VALUES, batch_size=3),
        lambda b: {"by_parity": Buckets(b["v"], b["v"].long() % 2, 3)},
        as_batch=lambda raw: {"v": raw},
    )
    result = run_probe(trainer(), model, probe)
    assert result.buckets["x/by_parity"] == [pytest.approx(4.0), pytest.approx(4.0), None]  # evens, odds, empty
    assert result.metrics == {}  # buckets are tables, not metrics


def test_a_pass_the_model_cannot_run_records_why_and_logs_nothing():
    def measure(batch):
        raise PoslabError("positions past encoder.max_len=8")

    result = run_probe(trainer(), Scaled(), Probe("x/{}", DataLoader(VALUES, batch_size=3), measure))
    assert result.metrics == {} and result.note == "positions past encoder.max_len=8"


def test_under_ddp_each_rank_reads_its_share_without_padding():
    """Lightning's test sampler pads an uneven set with repeats, which would change a mean."""
    loader = DataLoader(VALUES, batch_size=2)
    shares = [distributed(loader, SimpleNamespace(world_size=2, global_rank=r)) for r in (0, 1)]
    items = [torch.cat(list(share)).tolist() for share in shares]
    assert sorted(items[0] + items[1]) == VALUES.tolist()  # every item once
    assert len(items[0]) == 4 and len(items[1]) == 3
    assert distributed(loader, SimpleNamespace(world_size=1, global_rank=0)) is loader
