"""``data=videofolder`` and ``data=ucf101``: videos (files or frame folders) decoded in the loader's workers."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import torch
from PIL import Image

from poslab.config.composition import compose
from poslab.data import build_datamodule
from poslab.errors import ConfigError, DataError
from poslab.modalities.video.sources import folders
from poslab.modalities.video.sources.folders import (
    DecodedClips,
    load_ucf101,
    load_videofolder,
    read_clip,
    sample_ucf101,
    sample_videofolder,
    write_video,
)
from poslab.run.train import train


@pytest.fixture
def videos(tmp_path):
    """The generated folder: train/ and val/ of four motions, video files and frame folders of two sizes."""
    overrides = sample_videofolder(tmp_path)
    return tmp_path / "videofolder", ["data=videofolder", *overrides]


def tiny_video_files(tmp_path, overrides) -> list[str]:
    return ["modality=video", "logger=none", f"run.root={tmp_path / 'runs'}", *overrides, "data.frames=4",
            "data.batch_size=8", "data.eval_batch_size=8", "model.dim=16", "model.depth=1", "model.num_heads=2",
            "trainer.max_epochs=1", "trainer.enable_progress_bar=false"]  # fmt: skip


def gray_frames(count: int, size: int = 16) -> np.ndarray:
    """Frame t is a flat gray of value 8 * t (+ 40): which frames a clip took reads off its pixels."""
    return np.stack([np.full((size, size, 3), 40 + 8 * t, dtype=np.uint8) for t in range(count)])


def frame_values(clip) -> list[int]:
    return [round((float(np.mean(frame)) - 40) / 8) for frame in clip]  # MPEG-4 is lossy: nearest gray


def frame_folder(path, frames: np.ndarray) -> None:
    path.mkdir(parents=True)
    for t, frame in enumerate(frames, 1):
        Image.fromarray(frame).save(path / f"img_{t}.png")  # img_1 … img_21: natural order, not the names' order


@pytest.mark.parametrize("kind", ["frames", "avi", "mkv"])
def test_the_evaluation_clip_is_the_middle_one_frame_stride_apart(tmp_path, kind):
    """21 frames, clips of 4 frames 3 apart (a span of 10): the middle clip starts at (21 - 10) // 2 = 5 and takes
    frames 5, 8, 11, 14. AVI says how many frames it holds (decoding stops at the clip's last); Matroska does
    not (the whole video is decoded); a frame folder is read in natural order (img_2 before img_10)."""
    path = tmp_path / ("clip" if kind == "frames" else f"clip.{kind}")
    (frame_folder if kind == "frames" else write_video)(path, gray_frames(21))
    assert frame_values(read_clip(path, 4, 3, random_start=False)) == [5, 8, 11, 14]


def test_training_clips_start_anywhere_a_whole_clip_fits(tmp_path):
    write_video(tmp_path / "clip.avi", gray_frames(12))
    torch.manual_seed(0)
    firsts = set()
    for _ in range(60):
        values = frame_values(read_clip(tmp_path / "clip.avi", 3, 2, random_start=True))
        assert values == [values[0], values[0] + 2, values[0] + 4]
        firsts.add(values[0])
    assert firsts == set(range(12 - 5 + 1))  # starts 0 … 7: the last clip ends at frame 11


def test_a_video_shorter_than_a_clip_is_one_line_naming_it(tmp_path):
    write_video(tmp_path / "short.avi", gray_frames(6))
    frame_folder(tmp_path / "short", gray_frames(6))
    for path in (tmp_path / "short.avi", tmp_path / "short"):
        with pytest.raises(DataError, match=r"short(\.avi)?: 6 frames, shorter than a clip of 7 \(data.frames=4, "
                                            r"data.frame_stride=2\)"):  # fmt: skip
            read_clip(path, 4, 2, random_start=False)


def test_corrupt_and_truncated_videos_are_one_line_naming_them(tmp_path):
    write_video(tmp_path / "whole.avi", gray_frames(12))
    data = (tmp_path / "whole.avi").read_bytes()
    (tmp_path / "truncated.avi").write_bytes(data[: len(data) // 2])
    (tmp_path / "junk.mp4").write_bytes(b"not a video at all" * 20)
    (tmp_path / "riff.avi").write_bytes(b"RIFF1234AVI junk" * 10)  # opens, holds no video stream
    for name in ("truncated.avi", "junk.mp4", "riff.avi"):
        with pytest.raises(DataError, match=rf"{name}: not a readable video") as caught:
            read_clip(tmp_path / name, 4, 1, random_start=False)
        assert "\n" not in str(caught.value)


def test_frames_of_different_sizes_in_one_video_are_one_line(tmp_path):
    frame_folder(tmp_path / "mixed", gray_frames(5))
    Image.fromarray(np.zeros((20, 16, 3), dtype=np.uint8)).save(tmp_path / "mixed" / "img_3.png")
    with pytest.raises(DataError, match=r"mixed: frames of different sizes"):
        read_clip(tmp_path / "mixed", 5, 1, random_start=False)


def test_clips_of_any_size_and_channel_count_come_out_at_the_canvas(videos):
    """Grayscale PNG frames, RGB ones and MPEG-4 videos of 32 and 40 px: every clip is uint8 [T, 3, 32, 32];
    evaluation resizes the short side and takes the centre, training crops at random (the same for every frame)."""
    path, _ = videos
    files = load_videofolder(path, False, str(path))
    assert files.classes == ("east", "north", "south", "west") and len(files.folds) == 1
    fold = files.folds[0]
    assert len(fold.train) == 24 and len(fold.test) == 8
    for training in (False, True):
        clips = DecodedClips(fold.train, frames=4, stride=2, canvas=32, train=training)
        for i in range(len(clips)):
            clip, label = clips[i]
            assert clip.dtype == torch.uint8 and clip.shape == (4, 3, 32, 32) and label == fold.train[i][1]
    gray = next(p for p, label in fold.train if label == 0 and not p.endswith(".avi"))
    clip, _ = DecodedClips([(gray, 0)], frames=4, stride=1, canvas=32, train=False)[0]
    assert torch.equal(clip[:, 0], clip[:, 1]) and torch.equal(clip[:, 0], clip[:, 2])  # gray as RGB


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        ({"a/x.avi": True, "b/notes.txt": False}, r"/b: class folder holds no video"),
        ({"a/x.avi": True, "b/clip1/readme.txt": False}, r"/b/clip1: frame folder holds no image"),
        ({"train/a/x.avi": True, "val/a/y.avi": True, "val/z/y.avi": True}, r"val/z: class 'z' is in val/ but not"),
        ({"notes.txt": False}, r"holds no class subfolders"),
    ],
)
def test_a_bad_folder_is_one_line_naming_it(tmp_path, layout, message):
    for name, is_video in layout.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        if is_video:
            write_video(tmp_path / name, gray_frames(4))
        else:
            (tmp_path / name).write_text("no video")
    with pytest.raises(DataError, match=message) as caught:
        load_videofolder(tmp_path, False, str(tmp_path))
    assert "\n" not in str(caught.value)
    with pytest.raises(DataError, match="set data.path=<dir>"):
        load_videofolder(tmp_path, False, None)


def test_a_folder_trains_end_to_end_with_workers_and_its_probes(videos, tmp_path):
    """A 3D encoder, two loader workers, and ``motion``'s probes: clips twice as long (8 frames of the 16 each
    video holds) and a larger canvas, raw and rescaled; the folder's four classes size the model."""
    path, overrides = videos
    cfg = compose([*tiny_video_files(tmp_path, overrides), "encoder=rope3d", "data.num_workers=2",
                   "eval.frames=[8]", "eval.canvases=[48]"])  # fmt: skip
    assert cfg.data.tubelet == 2 and cfg.data.frame_stride == 1  # the folder's own defaults (VideoMAE's tubelet)
    summary = train(cfg)
    metrics = summary["metrics"]
    assert 0.0 <= metrics["test/acc"] <= 1.0 and np.isfinite(metrics["test/loss"])
    for probe in ("temporal/acc@8f", "spatial/acc@48px"):
        assert {f"{probe}/raw", f"{probe}/rescaled"} <= set(metrics)
    rows = summary["tables"]["test/acc_per_class"]["rows"]
    assert [row[0] for row in rows] == ["east", "north", "south", "west"]


def test_an_unreadable_video_stops_the_run_with_one_line_naming_it(videos, tmp_path):
    path, overrides = videos
    bad = path / "val" / "north" / "north_1.avi"
    bad.write_bytes(bad.read_bytes()[:300])
    args = [*tiny_video_files(tmp_path, overrides), "data.num_workers=1"]
    done = subprocess.run([sys.executable, "-m", "poslab", "train", *args[1:], "modality=video"],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("poslab: error:")]
    cause = "Invalid data found when processing input"  # FFmpeg's words
    assert errors == [f"poslab: error: {bad}: not a readable video ({cause})"], done.stderr[-2000:]
    assert not list((tmp_path / "runs").rglob("summary.json"))


def test_unreadable_and_short_videos_are_skipped_with_a_counted_warning_when_asked(videos, tmp_path):
    path, overrides = videos
    (path / "val" / "east" / "east_1.avi").write_bytes(b"junk")
    dm = build_datamodule(compose([*tiny_video_files(tmp_path, overrides), "data.frames=16", "data.frame_stride=1",
                                   "data.skip_unreadable=true", "data.num_workers=0"]))  # fmt: skip
    dm.setup("test")
    test = dm.splits["test"]
    assert [label for _, label in test.items] == [0, 0, 1, 1, 2, 2, 3, 3]
    with pytest.warns(UserWarning) as caught:
        labels = [test[i][1] for i in range(len(test))]
    assert labels == [0, 1, 1, 1, 2, 2, 3, 3]  # east_1 replaced by the next readable video, north's
    assert len(caught) == 1 and str(caught[0].message).endswith("1 so far in this loader process")
    dm = build_datamodule(compose([*tiny_video_files(tmp_path, overrides), "data.frames=18", "data.frame_stride=1",
                                   "data.skip_unreadable=true", "data.num_workers=0"]))  # fmt: skip
    dm.setup("test")
    with pytest.raises(DataError, match="no readable video among the 8"), pytest.warns(UserWarning) as caught:
        dm.splits["test"][1]
    messages = [str(w.message) for w in caught]
    assert len(messages) == 8 and "east_1.avi: not a readable video" in messages[0]
    assert all("16 frames, shorter than a clip of 18 (data.frames=18" in m for m in messages[1:])


def test_ucf101_reads_its_three_official_splits(tmp_path):
    """Fold k tests on group k (the sample's; upstream's groups 1-7, 8-14, 15-21) and trains on the others; the
    lists' CRLF line ends, classInd's 1-based labels and the test lists' missing labels are read as upstream's."""
    sample_ucf101(tmp_path)
    files = load_ucf101(tmp_path, False)
    assert files.classes == ("ApplyEyeMakeup", "Archery", "YoYo") and len(files.folds) == 3
    for k, fold in enumerate(files.folds, 1):
        assert all(f"_g{k:02d}_" in path for path, _ in fold.test) and len(fold.test) == 3
        assert not any(f"_g{k:02d}_" in path for path, _ in fold.train) and len(fold.train) == 9
        for path, label in fold.train + fold.test:
            assert files.classes[label] in path.split(os.sep)[-2]


def test_data_fold_picks_the_split_and_a_missing_one_is_one_line(tmp_path):
    root = tmp_path / "ucf"
    root.mkdir()
    overrides = [f"data.root={root}", "data=ucf101", "data.download=false", *sample_ucf101(root)]
    dm = build_datamodule(compose([*tiny_video_files(tmp_path, overrides), "data.fold=2"]))
    dm.setup("test")
    assert all("_g02_" in path for path, _ in dm.splits["test"].items)
    assert [len(dm.splits[k]) for k in ("train", "val", "test")] == [7, 2, 3]  # 9 training videos, 2 held out
    held = {item for k in ("train", "val") for item in dm.splits[k].items}
    assert len(held) == 9 and not held & set(dm.splits["test"].items)
    dm = build_datamodule(compose([*tiny_video_files(tmp_path, overrides), "data.fold=4"]))
    with pytest.raises(ConfigError, match=r"data.fold=4: data=ucf101 has 3 split\(s\); valid: 1, 2, 3"):
        dm.setup("fit")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("classInd.txt", "1 ApplyEyeMakeup\r\n3 Archery\r\n"), r"classInd.txt:2: expected '2 <Action>'"),
        (("trainlist01.txt", "Archery/v_Archery_g02_c01.avi 3\r\n"), r"trainlist01.txt:1: .* names no class"),
        (("testlist02.txt", "YoYo/v_YoYo_g09_c01.avi\r\n"), r"testlist02.txt:1: .*v_YoYo_g09_c01.avi is missing"),
    ],
)
def test_a_bad_ucf101_list_is_one_line_naming_its_line(tmp_path, edit, message):
    sample_ucf101(tmp_path)
    (tmp_path / "ucfTrainTestlist" / edit[0]).write_text(edit[1])
    with pytest.raises(DataError, match=message):
        load_ucf101(tmp_path, False)


def test_ucf101_downloads_checks_and_unpacks_both_archives_whole(tmp_path, monkeypatch):
    """Up to the network: ``fetch`` (its checksum and atomic write are tested with the other downloads) hands
    over the archives; the split lists' zip unpacks in Python, the videos' RAR with the first of unrar, 7z or
    bsdtar on PATH (here a stand-in unrar), each into a temporary folder moved in whole."""
    upstream = tmp_path / "upstream"
    upstream.mkdir()
    sample_ucf101(upstream)
    archives = tmp_path / "archives"
    archives.mkdir()
    with zipfile.ZipFile(archives / folders.UCF101_SPLITS[0], "w") as z:
        for f in (upstream / "ucfTrainTestlist").iterdir():
            z.write(f, f"ucfTrainTestlist/{f.name}")
    (archives / folders.UCF101_VIDEOS[0]).write_text(str(upstream))  # the stand-in unrar copies what it names
    fetched = []

    def fetch(url, path, sha256, download=True):
        fetched.append((url.rsplit("/", 1)[1], sha256))
        path.write_bytes((archives / path.name).read_bytes())
        return path

    monkeypatch.setattr(folders, "fetch", fetch)
    tools = tmp_path / "bin"
    tools.mkdir()
    unrar = tools / "unrar"
    unrar.write_text('#!/bin/sh\n[ "$1 $2 $3" = "x -o+ -idq" ] || exit 9\ncp -r "$(cat "$4")/UCF-101" "$5"\n')
    unrar.chmod(unrar.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}/usr/bin:/bin")
    root = tmp_path / "data"
    files = load_ucf101(root, True)
    assert [name for name, _ in fetched] == [folders.UCF101_SPLITS[0], folders.UCF101_VIDEOS[0]]
    assert [sha for _, sha in fetched] == [folders.UCF101_SPLITS[2], folders.UCF101_VIDEOS[2]]
    assert len(files.folds) == 3 and len(list((root / "UCF-101").rglob("*.avi"))) == 12
    assert not [p.name for p in root.iterdir() if p.name.startswith(".")], "a temporary folder was left behind"
    load_ucf101(root, True)  # there: nothing fetched again
    assert len(fetched) == 2


def test_ucf101_without_a_rar_tool_or_the_network_is_one_line(tmp_path, monkeypatch):
    with pytest.raises(DataError, match=r"UCF101 not found: .*ucfTrainTestlist is missing; set data.download=true"):
        load_ucf101(tmp_path, False)
    (tmp_path / "ucfTrainTestlist").mkdir()
    archive = tmp_path / folders.UCF101_VIDEOS[0]
    archive.write_bytes(b"Rar!")
    monkeypatch.setattr(folders, "fetch", lambda url, path, sha256, download=True: path)
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    with pytest.raises(DataError, match=r"unpacking UCF101.rar needs one of unrar, 7z, bsdtar on PATH"):
        load_ucf101(tmp_path, True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["UCF101.rar", "ucfTrainTestlist"]


def test_the_video_benchmark_measures_every_figure_at_toy_size(tmp_path, capsys):
    """``make bench-videos`` at toy size: AVI and frame folders decoded with and without workers, the model's step."""
    import json

    from poslab.modalities.video import bench as video_bench

    out = tmp_path / "videos.json"
    argv = ["--videos", "4", "--length", "6", "--frames", "4", "--canvas", "32", "--batch", "2", "--workers", "1",
            "--steps", "1", "--out", str(out)]  # fmt: skip
    assert video_bench.main(argv) == 0
    report = json.loads(out.read_text())
    measured = report["clips_per_s"]
    assert set(measured) == {"avi_0_workers", "avi_1_workers", "frames_0_workers", "frames_1_workers", "model"}
    assert all(v > 0 for v in measured.values())
    assert report["model"] == {"frames": 4, "canvas": 32, "tokens": 2 * 2 * 2, "dim": 64, "depth": 3}
    printed = capsys.readouterr().out
    assert printed.count("x the model |") == 4 and "model video (3 x 64), 8 tokens" in printed


@pytest.mark.timeout(60)
def test_a_loader_worker_forked_after_its_parent_decoded_decodes_too(videos):
    """FFmpeg's converter, kept per process, is made anew in a forked worker (one inherited from the parent hung)."""
    from torch.utils.data import DataLoader

    path, _ = videos
    avis = [item for item in load_videofolder(path, False, str(path)).folds[0].train if item[0].endswith(".avi")]
    clips = DecodedClips(avis[:2], frames=4, stride=1, canvas=32, train=False)
    here = clips[0][0]
    there, _ = next(iter(DataLoader(clips, batch_size=2, num_workers=1, multiprocessing_context="fork")))
    assert torch.equal(there[0], here)


@pytest.mark.slow
def test_a_3d_encoder_learns_the_motion_in_a_folder_of_videos(tmp_path):
    """The road is real for video: 240 generated AVIs of a square moving one of four ways (one pixel a frame, so
    8 frames move it one 8-px patch) read as ``videofolder`` reads them; rope3d learns the direction in 15
    epochs (test accuracy 0.55 here, chance 0.25; about a minute on 2 cores) and the training loss falls."""
    from poslab.modalities.video.sources.folders import MOTIONS, moving_squares

    rng = np.random.default_rng(0)
    for split, count in (("train", 60), ("val", 15)):
        for name, motion in MOTIONS.items():
            (tmp_path / "clips" / split / name).mkdir(parents=True)
            for k, clip in enumerate(moving_squares(motion, count, 12, 32, rng)):
                write_video(tmp_path / "clips" / split / name / f"{k}.avi", clip)
    summary = train(compose([
        "modality=video", "data=videofolder", f"data.path={tmp_path / 'clips'}", "data.canvas=32",
        "data.patch_size=8", "data.frames=8", "data.tubelet=1", "data.val_size=20", "data.augment=false",
        "data.batch_size=16", "data.num_workers=1", "encoder=rope3d", "trainer.max_epochs=15", "logger=none",
        f"run.root={tmp_path / 'runs'}", "trainer.enable_progress_bar=false",
    ]))  # fmt: skip
    losses = [loss for _, loss in summary["history"]["train/loss"]]
    assert sum(losses[-3:]) / 3 < 0.7 * sum(losses[:3]) / 3
    assert summary["metrics"]["test/acc"] >= 0.45


def test_validation_keeps_its_workers_and_a_test_pass_lets_them_go(videos, tmp_path):
    """Each probe makes its own test loader: persistent, their workers would pile up until the run ends."""
    _, overrides = videos
    dm = build_datamodule(compose([*tiny_video_files(tmp_path, overrides), "data.num_workers=2"]))
    dm.setup("fit"), dm.setup("test")
    assert dm.train_dataloader().persistent_workers and dm.val_dataloader().persistent_workers
    assert not dm.test_dataloader().persistent_workers
    assert dm.cfg.eval_batch_size == 8  # the command line's; a folder's own default is 64
    assert compose(["modality=video", "data=videofolder"]).data.eval_batch_size == 64


def test_a_second_process_unpacking_the_same_archive_keeps_the_first_copy(tmp_path, monkeypatch):
    """Ranks of one launch may all download and unpack: the one that moves its copy in last drops it, no error."""
    archive = tmp_path / "videos.rar"
    archive.write_text("")
    tools = tmp_path / "bin"
    tools.mkdir()
    unrar = tools / "unrar"  # unpacks, while "another process" moves its own copy in first
    unrar.write_text(f'#!/bin/sh\nmkdir -p "$5/UCF-101/A" "{tmp_path}/UCF-101/B"\n')
    unrar.chmod(unrar.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}/usr/bin:/bin")
    folders.unpack(archive, tmp_path, "UCF-101")
    assert [p.name for p in (tmp_path / "UCF-101").iterdir()] == ["B"]
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_ucf101_trains_end_to_end_on_a_fold_with_a_learned_table(tmp_path):
    """UCF101's layout, fold 3, a learned space-time table (sized by the training clip: the longer probe reads
    it at rescaled positions; raw ones run past it, a metric the run cannot make): trained, tested on the
    fold's test group, probed; its classes are classInd's."""
    root = tmp_path / "ucf"
    root.mkdir()
    overrides = [f"data.root={root}", "data=ucf101", "data.download=false", *sample_ucf101(root), "data.fold=3"]
    cfg = compose([*tiny_video_files(tmp_path, overrides), "encoder=learned3d", "eval.frames=[8]"])
    summary = train(cfg)
    assert {"test/acc", "temporal/acc@8f/rescaled"} <= set(summary["metrics"])
    assert "temporal/acc@8f/raw" not in summary["metrics"]
    rows = summary["tables"]["test/acc_per_class"]["rows"]
    assert [row[0] for row in rows] == ["ApplyEyeMakeup", "Archery", "YoYo"]


def test_the_ucf101_motion_experiment_runs_at_toy_size(tmp_path):
    """experiment=motion_ucf101, shrunk (a CPU, width 16, 4-frame clips of 32 px, an 8-frame probe) on UCF101's
    layout: trained, tested and probed end to end, every scalar in its W&B summary, its expectations parsed; at
    its own size it is ViT-S on 16 x 112 px clips on a GPU."""
    from poslab.study.expectations import Expectation
    from tests.track.test_wandb_summary import assert_all_scalars_in_wandb

    full = compose(["experiment=motion_ucf101"])
    assert (full.model.dim, full.model.depth, full.data.frames, full.data.canvas, full.data.tubelet) == (
        384, 12, 16, 112, 2
    )  # fmt: skip
    assert full.trainer.accelerator == "gpu" and full.data.fold == 1 and full.eval.frames == [32]
    assert all(Expectation.parse(text) for text in full.expect)
    root = tmp_path / "ucf"
    root.mkdir()
    toy = compose(["experiment=motion_ucf101", f"data.root={root}", "data.download=false", *sample_ucf101(root),
                   "trainer=cpu", "model.dim=16", "model.depth=1", "model.num_heads=2", "data.frames=4",
                   "data.batch_size=4", "data.eval_batch_size=4", "data.num_workers=0", "eval.frames=[8]",
                   "eval.canvases=[48]", "trainer.max_steps=2", "trainer.max_epochs=1", "logger=wandb",
                   "logger.mode=offline", f"run.root={tmp_path / 'runs'}", "trainer.enable_progress_bar=false",
                   "encoder=videorope"])  # fmt: skip
    summary = train(toy)
    assert {"test/acc", "temporal/acc@8f/raw", "spatial/acc@48px/rescaled"} <= set(summary["metrics"])
    assert_all_scalars_in_wandb(summary)
