"""``data=imagefolder``: a folder of class subfolders (the ImageNet layout), decoded in the loader's workers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from poslab.config.composition import compose
from poslab.data import build_datamodule
from poslab.errors import DataError
from poslab.modalities.vision.sources.folders import DecodedImages, load_imagefolder, sample_imagefolder
from poslab.run.train import train
from tests.track.test_wandb_summary import assert_all_scalars_in_wandb


@pytest.fixture
def folder(tmp_path):
    overrides = sample_imagefolder(tmp_path)
    return tmp_path / "imagefolder", overrides


def save(path, pixels):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.asarray(pixels, dtype=np.uint8)).save(path)


def test_train_and_val_folders_are_the_training_and_test_images(folder, tiny):
    path, overrides = folder
    dm = build_datamodule(compose([*tiny, "data=imagefolder", *overrides, "data.num_workers=0"]))
    dm.setup("fit")
    assert dm.class_names == ("ant", "bee", "cat") and dm.model_facts() == {"num_classes": 3, "in_chans": 3}
    assert [len(dm.splits[k]) for k in ("train", "val", "test")] == [20, 4, 6]  # 24 train images, 4 held out
    assert sorted(dm.splits["test"].items) == sorted(
        (str(p), ("ant", "bee", "cat").index(p.parent.name)) for p in (path / "val").rglob("*.*")
    )
    images, labels = next(iter(dm.train_dataloader()))
    assert images.dtype == torch.uint8 and images.shape[1:] == (3, 32, 32) and labels.shape == images.shape[:1]
    batch = dm.as_batch((images, labels), training=True)
    assert batch["image"].shape == (len(labels), 3, 32, 32) and batch["pos"].coords.shape == (16, 2)


def test_the_class_folders_alone_hold_out_test_images_by_count(folder, tiny):
    path, overrides = folder
    flat = path / "train"  # the class folders themselves: no train/ inside
    dm = build_datamodule(compose([*tiny, "data=imagefolder", *overrides, f"data.path={flat}", "data.test_size=5"]))
    dm.setup("fit")
    assert [len(dm.splits[k]) for k in ("train", "val", "test")] == [15, 4, 5]
    held = {item for k in ("train", "val", "test") for item in dm.splits[k].items}
    assert len(held) == 24  # every file once


def test_evaluation_resizes_the_short_side_and_takes_the_centre(tmp_path):
    """DeiT's evaluation crop: short side to size / 0.875 (40 -> 37 for 32), then the centre 32 x 32. An 80-px
    tall image, red above blue: 74 rows after the resize, rows 21-52 kept, the colours meeting at row 37."""
    pixels = np.zeros((80, 40, 3), np.uint8)
    pixels[:40, :, 0] = 255
    pixels[40:, :, 2] = 255
    save(tmp_path / "a.png", pixels)
    save(tmp_path / "gray.png", np.full((40, 40), 77))
    image, _ = DecodedImages([(str(tmp_path / "a.png"), 0)], 32, train=False)[0]
    assert image.shape == (3, 32, 32) and image.dtype == torch.uint8
    assert (image[0, :15] == 255).all() and (image[2, :15] == 0).all()
    assert (image[0, 17:] == 0).all() and (image[2, 17:] == 255).all()
    from torchvision.transforms.v2 import functional as tf

    noise = np.random.default_rng(0).integers(0, 255, (50, 90, 3))
    save(tmp_path / "noise.png", noise)
    expected = tf.center_crop(tf.resize(torch.as_tensor(noise).permute(2, 0, 1).to(torch.uint8), 37), [32, 32])
    assert torch.equal(DecodedImages([(str(tmp_path / "noise.png"), 0)], 32, train=False)[0][0], expected)
    gray, _ = DecodedImages([(str(tmp_path / "gray.png"), 0)], 32, train=False)[0]
    assert (gray == 77).all()  # grayscale read as RGB: three equal channels
    torch.manual_seed(0)
    crops = [DecodedImages([(str(tmp_path / "a.png"), 0)], 32, train=True)[0][0] for _ in range(8)]
    assert all(c.shape == (3, 32, 32) for c in crops) and len({c[0].float().mean().item() for c in crops}) > 1


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        ({"train/ant/0.png": 1, "train/bee/x.txt": 0}, r"train/bee: class folder holds no image"),
        ({"train/ant/0.png": 1, "val/ant/0.png": 1, "val/cow/0.png": 1}, r"val/cow: class 'cow' is in val/ but not"),
        ({"readme.txt": 0}, r"holds no class subfolders"),
    ],
)
def test_a_bad_folder_is_one_line_naming_it(tmp_path, layout, message):
    for name, is_image in layout.items():
        if is_image:
            save(tmp_path / name, np.zeros((8, 8, 3)))
        else:
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name).write_text("not an image")
    with pytest.raises(DataError, match=message) as caught:
        load_imagefolder(tmp_path, False, str(tmp_path))
    assert "\n" not in str(caught.value)
    with pytest.raises(DataError, match="set data.path=<dir>"):
        load_imagefolder(tmp_path, False, None)


def test_an_unreadable_image_stops_the_run_with_one_line_naming_it(folder, tmp_path):
    """Decoded in a worker process: PyTorch re-raises its error with the worker's traceback; the command
    prints the image's own line and exits 2."""
    path, overrides = folder
    bad = path / "train" / "bee" / "3.jpg"
    bad.write_bytes(bad.read_bytes()[:200])  # truncated
    (path / "train" / "cat" / "9.png").write_bytes(b"\x89PNG but not one")  # corrupt
    with pytest.raises(DataError, match=r"9.png: not a readable image"):
        DecodedImages([(str(path / "train" / "cat" / "9.png"), 0)], 32, train=False)[0]
    with pytest.raises(DataError, match=r"3.jpg: not a readable image"):
        DecodedImages([(str(bad), 0)], 32, train=False)[0]
    args = ["modality=vision", "data=imagefolder", *overrides, "data.num_workers=1", "data.val_size=2",
            "model.dim=16", "model.depth=1", "model.num_heads=2", "trainer.max_epochs=1", "logger=none",
            f"run.root={tmp_path / 'runs'}", "trainer.enable_progress_bar=false"]  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "poslab", "train", *args], capture_output=True, text=True)
    assert done.returncode == 2, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("poslab: error:")]
    assert len(errors) == 1 and "not a readable image" in errors[0], done.stderr[-2000:]
    assert errors[0].split("poslab: error: ")[1].startswith(str(path / "train"))


def test_a_folder_trains_end_to_end_with_workers(folder, tiny):
    """Trained, tested, and probed at another resolution (the test images decoded at 48 px: a 6 x 6 grid)."""
    path, overrides = folder
    cfg = compose(
        [*tiny, "data=imagefolder", *overrides, "data.num_workers=2", "model.dim=16", "eval.image_sizes=[48]"]
    )
    summary = train(cfg)
    assert summary["config"]["data"]["path"] == str(path)
    metrics = summary["metrics"]
    assert 0.0 <= metrics["test/acc"] <= 1.0 and np.isfinite(metrics["test/loss"])
    assert {"resolution/acc@48/raw", "resolution/acc@48/rescaled"} <= set(metrics)


def test_tiny_imagenet_reads_its_layout_val_annotations_as_the_test_labels(tmp_path):
    from poslab.modalities.vision.sources.folders import load_tiny_imagenet, sample_tiny_imagenet

    sample_tiny_imagenet(tmp_path)
    files = load_tiny_imagenet(tmp_path, False)
    assert files.classes == ("n01443537", "n01443538", "n01443539")  # sorted, whatever wnids.txt's order
    assert len(files.train) == 18 and all(p.endswith(".JPEG") for p, _ in files.train)  # the box files are not images
    assert [(p.rsplit("/", 1)[1], label) for p, label in files.test] == [
        ("val_0.JPEG", 0), ("val_1.JPEG", 0), ("val_2.JPEG", 1), ("val_3.JPEG", 1), ("val_4.JPEG", 2), ("val_5.JPEG", 2)
    ]  # fmt: skip
    assert all(label == files.classes.index(p.split("/")[-3]) for p, label in files.train)
    annotations = tmp_path / "tiny-imagenet-200" / "val" / "val_annotations.txt"
    annotations.write_text(annotations.read_text() + "val_9.JPEG\tn09999999\t0\t0\t1\t1\n")
    with pytest.raises(DataError, match=r"val_annotations.txt:7: unknown class 'n09999999'"):
        load_tiny_imagenet(tmp_path, False)
    with pytest.raises(DataError, match=r"Tiny-ImageNet not found under .*set data.download=true"):
        load_tiny_imagenet(tmp_path / "elsewhere", False)


def test_tiny_imagenet_downloads_whole_or_leaves_nothing(tmp_path, monkeypatch):
    """torchvision downloads and checks the archive into a temporary folder, which is moved in whole; a failed
    download is one line and leaves nothing behind."""
    import torchvision.datasets.utils as tv_utils

    from poslab.modalities.vision.sources.folders import (
        TINY_IMAGENET_MD5,
        TINY_IMAGENET_URL,
        load_tiny_imagenet,
        sample_tiny_imagenet,
    )

    calls = []

    def fake_download(url, download_root, md5=None, **kwargs):
        calls.append((url, md5))
        sample_tiny_imagenet(Path(download_root))

    monkeypatch.setattr(tv_utils, "download_and_extract_archive", fake_download)
    assert len(load_tiny_imagenet(tmp_path, True).train) == 18
    assert calls == [(TINY_IMAGENET_URL, TINY_IMAGENET_MD5)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny-imagenet-200"]
    load_tiny_imagenet(tmp_path, True)
    assert len(calls) == 1  # there already: no second download

    def failing(url, download_root, md5=None, **kwargs):
        (Path(download_root) / "tiny-imagenet-200.zip").write_bytes(b"half")
        raise RuntimeError("File not found or corrupted.\nmore")

    monkeypatch.setattr(tv_utils, "download_and_extract_archive", failing)
    elsewhere = tmp_path / "other"
    with pytest.raises(DataError, match=r"^downloading Tiny-ImageNet failed: File not found or corrupted.$"):
        load_tiny_imagenet(elsewhere, True)
    assert list(elsewhere.iterdir()) == []


def test_the_imagenet_resolution_experiment_runs_at_toy_size_on_a_folder(folder, tmp_path):
    """experiment=resolution_imagenet, shrunk (a CPU, width 16, 32-px crops, a 48-px probe): trained, tested
    and probed end to end, every scalar in its W&B summary, its expectations parsed; at its own size it is DeiT-S
    at 224 on a GPU."""
    from poslab.study.expectations import Expectation

    path, overrides = folder
    full = compose(["experiment=resolution_imagenet", f"data.path={path}"])
    assert (full.model.dim, full.model.depth, full.data.image_size, full.data.patch_size) == (384, 12, 224, 16)
    assert full.trainer.accelerator == "gpu" and full.eval.image_sizes == [160, 288, 384, 448]
    assert all(Expectation.parse(text) for text in full.expect)
    toy = compose(["experiment=resolution_imagenet", *overrides, "trainer=cpu", "model.dim=16", "model.depth=1",
                   "model.num_heads=2", "data.batch_size=8", "data.eval_batch_size=8", "data.num_workers=0",
                   "eval.image_sizes=[48]", "trainer.max_steps=2", "trainer.max_epochs=1", "logger=wandb",
                   "logger.mode=offline",
                   f"run.root={tmp_path / 'runs'}", "trainer.enable_progress_bar=false", "encoder=rope2d"])  # fmt: skip
    summary = train(toy)
    assert {"test/acc", "resolution/acc@48/raw", "resolution/acc@48/rescaled"} <= set(summary["metrics"])
    assert_all_scalars_in_wandb(summary)  # what every experiment's tiny run checks (tests/track)


def test_ropevits_rows_are_printed_beside_runs_of_their_width():
    """The report's table for DeiT-S-wide runs: poslab's top-1 (%) at each size, raw and rescaled, then RoPE-ViT's
    DeiT-III-S rows at 224 and 384 with their source; runs of a width nobody published get no table."""
    from poslab.modalities.vision.published import published, tables
    from poslab.study.report import Group

    small = published(384)
    assert [(p.encoder, p.top1) for p in small] == [
        ("learned2d", {224: 80.4, 384: 79.4}), ("rope2d", {224: 80.9, 384: 80.0}),
        ("rope2d_mixed", {224: 80.9, 384: 81.8}),
    ]  # fmt: skip
    assert all("rope-vit" in p.source and "Heo et al. 2024" in p.source for p in small)

    def group(encoder, dim, metrics):
        run = {"config": {"model": {"dim": dim}, "data": {"image_size": 224, "name": "imagefolder", "quadrant": False}},
               "metrics": metrics}  # fmt: skip
        return Group("vision", "resolution_imagenet", encoder, "c", [run], label=encoder)

    runs = [
        group("rope2d", 384, {"test/acc": 0.801, "resolution/acc@384/raw": 0.7, "resolution/acc@384/rescaled": 0.75})
    ]
    text = "\n".join(tables(runs))
    assert "width 384" in text and "| 224 px | 384 px |" in text
    assert (
        "| `rope2d` (rescaled) | poslab | 80.1 | 75.0 |" in text and "| `rope2d` (raw) | poslab | 80.1 | 70.0 |" in text
    )
    assert "| DeiT-III-S `rope2d_mixed` | naver-ai/rope-vit README" in text and "| 80.9 | 81.8 |" in text
    assert tables([group("rope2d", 64, {"test/acc": 0.9, "resolution/acc@56/raw": 0.5})]) == []


def test_deits_augmentations_erase_mix_and_randaugment_in_training_only(folder, tiny):
    """Mixup / CutMix turn the labels into distributions over the classes (rows summing to 1, the two labels'
    shares); erasing puts a box of noise into each image at p = 1; RandAugment changes the decoded crops; none of
    it touches evaluation batches. A run with all of them trains and its loss is the soft targets' cross-entropy."""
    path, overrides = folder
    deit = ["data.augment.randaugment=true", "data.augment.erasing=1.0", "data.augment.mixup=0.8",
            "data.augment.cutmix=1.0"]  # fmt: skip
    dm = build_datamodule(compose([*tiny, "data=imagefolder", *overrides, "data.num_workers=0", *deit]))
    dm.setup("fit")
    images, labels = next(iter(dm.train_dataloader()))
    torch.manual_seed(0)
    batch = dm.as_batch((images, labels), training=True)
    assert batch["label"].shape == (len(labels), 3) and batch["label"].dtype == torch.float32
    torch.testing.assert_close(batch["label"].sum(-1), torch.ones(len(labels)))
    own = batch["label"][torch.arange(len(labels)), labels]  # each image's share: one lambda for the batch
    other = batch["label"][torch.arange(len(labels)), labels.roll(1)]  # the image it was mixed with
    differ = labels != labels.roll(1)
    assert len(set(own[differ].tolist())) == 1 and torch.allclose(own[differ] + other[differ], torch.ones(1))
    plain = dm.prepare_images(images, augment=False)
    erased = dm.prepare_images(images, augment=True)
    assert all((e != p).any() for e, p in zip(erased, plain, strict=True))  # p = 1: every image has its box
    assert torch.equal(dm.as_batch((images, labels), training=False)["label"], labels)
    torch.manual_seed(0)
    with_ra = dm.splits["train"][0][0]
    torch.manual_seed(0)
    without = DecodedImages(dm.splits["train"].items[:1], 32, train=True)[0][0]
    assert with_ra.shape == without.shape == (3, 32, 32) and not torch.equal(with_ra, without)
    summary = train(compose([*tiny, "data=imagefolder", *overrides, "data.num_workers=0", "model.dim=16", *deit]))
    assert np.isfinite(summary["metrics"]["test/loss"])


def test_soft_targets_are_the_loss_and_their_argmax_the_accuracy():
    import torch.nn.functional as F
    from torchmetrics.classification import MulticlassAccuracy

    from poslab.tasks.classification import Classifier

    class Task(Classifier):
        def build_model(self, cfg, encoder, num_classes, in_chans):
            return torch.nn.Identity()

        def forward(self, images, pos):
            return images

        def log(self, *args, **kwargs):
            pass

    task = Task.__new__(Task)
    torch.nn.Module.__init__(task)
    task.label_smoothing = 0.1
    logits = torch.tensor([[2.0, 0.0, -1.0], [0.0, 1.0, 3.0]])
    soft = torch.tensor([[0.7, 0.3, 0.0], [0.0, 0.4, 0.6]])
    metric = MulticlassAccuracy(3, average="micro")
    loss, _ = task._step({"image": logits, "pos": None, "label": soft}, "train", metric)
    smoothed = soft * 0.9 + 0.1 / 3
    expected = -(smoothed * logits.log_softmax(-1)).sum(-1).mean()
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(F.cross_entropy(logits, soft, label_smoothing=0.1), expected)
    assert metric.compute().item() == 1.0  # argmax of the targets: classes 0 and 2, both predicted


def test_the_image_benchmark_measures_every_figure_at_toy_size(tmp_path, capsys):
    """``make bench-images`` at toy size: decoding with and without workers, the ViT's step, a small set both ways."""
    from poslab.modalities.vision import bench as image_bench

    out = tmp_path / "images.json"
    argv = ["--images", "20", "--source", "40", "--size", "32", "--batch", "8", "--workers", "1", "--steps", "1",
            "--small", "30", "--out", str(out)]  # fmt: skip
    assert image_bench.main(argv) == 0
    measured = json.loads(out.read_text())["samples_per_s"]
    assert set(measured) == {"decode_0_workers", "decode_1_workers", "model", "small_decode_0_workers",
                             "small_decode_1_workers", "small_in_memory"}  # fmt: skip
    assert all(v > 0 for v in measured.values())
    printed = capsys.readouterr().out
    assert "x the model |" in printed and "x decoding |" in printed and "model vit-tiny at 32 px" in printed


def test_unreadable_images_are_skipped_with_a_counted_warning_when_asked(folder, tiny):
    """data.skip_unreadable=true: a corrupt image is named in a warning that counts them, and the next file (with
    its own label) takes its place; a split with no readable image is still one error."""
    path, overrides = folder
    (path / "val" / "bee" / "0.png").write_bytes(b"not a png")
    (path / "val" / "bee" / "1.jpg").write_bytes(b"nor a jpeg")
    dm = build_datamodule(compose([*tiny, "data=imagefolder", *overrides, "data.num_workers=0",
                                   "data.skip_unreadable=true"]))  # fmt: skip
    dm.setup("fit")
    test = dm.splits["test"]
    with pytest.warns(UserWarning) as caught:
        pairs = [test[i] for i in range(len(test))]
    messages = [str(w.message) for w in caught]
    assert len(messages) == 3  # 0.png once; 1.jpg twice, in its own place and in 0.png's
    assert "val/bee/0.png: not a readable image" in messages[0] and messages[0].endswith(
        "1 so far in this loader process"
    )
    assert messages[-1].endswith("3 so far in this loader process")
    labels = [label for _, label in pairs]
    assert labels == [0, 0, 2, 2, 2, 2]  # bee's two images replaced by the next readable ones: cat's
    assert all(image.shape == (3, 32, 32) for image, _ in pairs)
    for item in test.items:
        Path(item[0]).write_bytes(b"")
    with pytest.raises(DataError, match="no readable image among the 6"), pytest.warns(UserWarning):
        test[0]
