"""Shared fixtures: a CPU-sized config, a shared data cache, no W&B server."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

# Tests never reach a W&B server and never pick up the user's credentials.
os.environ["WANDB_SILENT"] = "true"
os.environ.pop("WANDB_API_KEY", None)
os.environ.pop("WANDB_MODE", None)
os.environ["NETRC"] = os.devnull
# poslab's own cache (the CPU's measured matmul peak) stays out of the user's home: one per test process.
os.environ["POSLAB_CACHE"] = tempfile.mkdtemp(prefix="poslab-cache-")
atexit.register(shutil.rmtree, os.environ["POSLAB_CACHE"], ignore_errors=True)

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(scope="session")
def data_root(tmp_path_factory) -> Path:
    """One download / cache folder for the whole session (mnist5k.npz is built once)."""
    return tmp_path_factory.mktemp("data")


@pytest.fixture
def tiny(tmp_path, data_root) -> list[str]:
    """Overrides that shrink a vision run to a few CPU seconds."""
    return [
        "logger=none",
        f"run.root={tmp_path / 'runs'}",
        f"data.root={data_root}",
        "data.batch_size=64",
        "data.eval_batch_size=250",
        "model.dim=32",
        "model.depth=1",
        "model.num_heads=2",
        "trainer.max_epochs=1",
        "trainer.limit_train_batches=3",
        "trainer.limit_val_batches=1",
        "trainer.limit_test_batches=1",
        "trainer.enable_progress_bar=false",
    ]


@pytest.fixture(scope="session")
def corpus_file(tmp_path_factory) -> Path:
    """A generated 30,000-character corpus (seeded words and line breaks)."""
    import random

    rng = random.Random(0)
    words = ["the", "king", "shall", "speak", "to", "thee", "my", "lord", "and", "what", "is", "love", "o", "night"]
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 9))).capitalize() + "." for _ in range(900)]
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_text("\n".join(lines)[:30000], encoding="utf-8")
    return path


@pytest.fixture
def tiny_text(tmp_path, corpus_file) -> list[str]:
    """Overrides that shrink a text run to a few CPU seconds."""
    return [
        "modality=text",
        "logger=none",
        f"run.root={tmp_path / 'runs'}",
        "data=textfile",
        f"data.path={corpus_file}",
        "data.context=16",
        "data.batch_size=8",
        "data.eval_batch_size=16",
        "data.eval_tokens=256",
        "model.dim=32",
        "model.depth=1",
        "model.num_heads=2",
        "trainer.max_steps=4",
        "trainer.val_check_interval=2",
        "trainer.limit_val_batches=2",
        "trainer.enable_progress_bar=false",
    ]


@pytest.fixture(scope="session")
def weekday_csv(tmp_path_factory) -> Path:
    """Hourly series that is 1 on weekdays and -1 at weekends (plus a little noise), 16 weeks."""
    import numpy as np
    import pandas as pd

    dates = pd.date_range("2021-01-04 00:00", periods=16 * 7 * 24, freq="h")  # a Monday
    rng = np.random.default_rng(0)
    values = np.where(dates.day_of_week < 5, 1.0, -1.0) + 0.05 * rng.normal(size=len(dates))
    path = tmp_path_factory.mktemp("weekday") / "weekday.csv"
    pd.DataFrame({"date": dates.strftime("%Y-%m-%d %H:%M:%S"), "y": values}).to_csv(path, index=False)
    return path


@pytest.fixture
def tiny_ts(tmp_path, weekday_csv) -> list[str]:
    """Overrides that shrink a forecasting run to a few CPU seconds."""
    return [
        "modality=timeseries",
        "logger=none",
        f"run.root={tmp_path / 'runs'}",
        "data=csvfile",
        f"data.path={weekday_csv}",
        "data.lookback=48",
        "data.horizon=24",
        "data.batch_size=32",
        "model.dim=16",
        "model.depth=1",
        "model.num_heads=2",
        "model.patch_len=8",
        "model.stride=8",
        "trainer.max_epochs=1",
        "trainer.limit_train_batches=3",
        "trainer.limit_val_batches=2",
        "trainer.enable_progress_bar=false",
    ]


@pytest.fixture
def tiny_video(tmp_path, data_root) -> list[str]:
    """Overrides that shrink a video run to a few CPU seconds: 4 frames of a 16 px canvas, 4 px patches."""
    return [
        "modality=video",
        "logger=none",
        f"run.root={tmp_path / 'runs'}",
        f"data.root={data_root}",
        "data.frames=4",
        "data.canvas=16",
        "data.digit_size=8",
        "data.patch_size=4",
        "data.train_clips=128",
        "data.val_size=32",
        "data.test_size=32",
        "data.batch_size=32",
        "model.dim=32",
        "model.depth=1",
        "model.num_heads=2",
        "trainer.max_epochs=1",
        "trainer.limit_train_batches=3",
        "trainer.enable_progress_bar=false",
    ]


@pytest.fixture
def accept_any_checksum(monkeypatch):
    """Any file passes its checksum (ours and torchvision's): a generated sample cannot match the real file's
    hash. The checks themselves are tested on their own."""

    class AnyHash(str):
        def __eq__(self, other) -> bool:  # `in` a file's accepted digests too
            return True

        def __ne__(self, other) -> bool:
            return False

        __hash__ = str.__hash__

    monkeypatch.setattr("poslab.data.downloads.sha256_of", lambda path: AnyHash("sample"))
    cifar = pytest.importorskip("torchvision.datasets.cifar")
    monkeypatch.setattr(cifar, "check_integrity", lambda *args, **kwargs: True)


#: The fixture shrinking each built-in modality's run to a few CPU seconds, on data generated for the tests;
#: registry-wide tests run every modality through :func:`tiny_overrides`.
TINY = {"vision": "tiny", "text": "tiny_text", "timeseries": "tiny_ts", "video": "tiny_video"}


def tiny_overrides(request, modality: str) -> list[str]:
    """A few-CPU-seconds run of ``modality``: its fixture in :data:`TINY`, else (a plugin's modality) what its
    record declares (``Modality.tiny``) on its own data."""
    if modality in TINY:
        return list(request.getfixturevalue(TINY[modality]))
    import dataclasses

    from poslab.modalities.registry import get_modality

    record = get_modality(modality)
    tmp_path = request.getfixturevalue("tmp_path")
    reads_files = "root" in {f.name for f in dataclasses.fields(record.data)}
    root = [f"data.root={request.getfixturevalue('data_root')}"] if reads_files else []
    return [f"modality={modality}", "logger=none", f"run.root={tmp_path / 'runs'}", *root,
            "trainer.enable_progress_bar=false", *record.tiny]  # fmt: skip


def flex_ready_validation(request, modality: str, encoder: str) -> tuple:
    """(task in eval mode, a validation batch, the backbone outputs it records) for ``encoder`` on ``modality``'s
    tiny config, its head dim at least 16 (what FlexAttention's kernels take) and its learned parameters
    random (learned biases start at zero, which would hide a bias read wrongly)."""
    import torch

    from poslab.config.composition import compose
    from poslab.data import build_datamodule
    from poslab.tasks import build_task

    overrides = [*tiny_overrides(request, modality), f"encoder={encoder}"]
    model = compose(overrides).model
    cfg = compose([*overrides, f"model.dim={max(model.dim, 16 * model.num_heads)}"])
    datamodule = build_datamodule(cfg)
    datamodule.prepare_data()
    datamodule.setup("fit")
    torch.manual_seed(0)
    task = build_task(cfg, datamodule).eval()
    for p in task.encoder.parameters():
        torch.nn.init.normal_(p, std=0.5)
    outputs: list = []
    task.backbone.register_forward_hook(
        lambda module, args, out: outputs.append(out[0] if isinstance(out, tuple) else out)
    )
    return task, datamodule.as_batch(next(iter(datamodule.val_dataloader()))), outputs


@contextmanager
def held_by_another_process(run_dir: Path) -> Iterator[None]:
    """``run_dir``'s run lock held by a forked process for the duration of the block (released after it)."""
    import multiprocessing

    from poslab.run.rundir import run_lock

    ready, done = multiprocessing.Event(), multiprocessing.Event()

    def hold() -> None:
        with run_lock(run_dir):
            ready.set()
            done.wait(60)

    holder = multiprocessing.get_context("fork").Process(target=hold)
    holder.start()
    try:
        assert ready.wait(30), "the holder did not take the lock"
        yield
    finally:
        done.set()
        holder.join(30)


def assert_refused_in_one_line(tiny: list[str], override: str, message: str, capsys) -> None:
    """``poslab train`` of the tiny run with ``override``: exit 2, one error line holding ``message``, no file."""
    from poslab.cli import main

    run_root = Path(next(o for o in tiny if o.startswith("run.root=")).split("=", 1)[1])
    assert main(["train", *tiny, override]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not [p for p in run_root.rglob("*") if p.is_file()]
