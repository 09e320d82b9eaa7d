"""Videos read from files: ``videofolder`` (class folders of videos or of frame folders) and ``ucf101`` (UCF101
with its three official splits, downloaded).

A video is a file PyAV decodes (``.avi``, ``.mp4``, ``.mkv``, …; torchvision no longer reads videos) or a
folder of its frames as images (``frame_1.jpg``, …, in natural order: ``frame_2`` before ``frame_10``). The
pixels are not loaded here: each clip is decoded, converted to RGB and cropped to ``data.canvas`` in the data
loader's worker processes when a batch needs it (``data.num_workers``), so a set larger than memory trains.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from poslab.data.downloads import fetch
from poslab.data.labelled_files import LabelledFiles
from poslab.errors import DataError
from poslab.modalities.video.clips import render, trajectories
from poslab.modalities.video.sources import SAMPLES, SOURCES, Fold, VideoFiles, VideoSource
from poslab.modalities.vision.sources.folders import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    image_suffixes,
    read_rgb,
    split_folders,
)

#: Container suffixes read as videos (PyAV reads more: rename, or add to this set).
VIDEO_SUFFIXES = {".avi", ".mp4", ".m4v", ".mkv", ".mov", ".webm", ".mpg", ".mpeg", ".wmv", ".flv", ".3gp", ".ogv"}


def natural_key(path: Path) -> list:
    """``frame_2`` before ``frame_10``: digit runs compare as numbers."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path.name)]


def frame_files(folder: Path) -> list[Path]:
    """A frame folder's images, in natural order."""
    suffixes = image_suffixes()
    return sorted((f for f in folder.iterdir() if f.suffix.lower() in suffixes and f.is_file()), key=natural_key)


def scan(folder: Path) -> dict[str, list[Path]]:
    """Class name -> its videos (files, and folders of frames), sorted; an empty class folder or frame folder,
    or none at all, is one line naming it."""
    if not folder.is_dir():
        raise DataError(f"{folder} is not a folder of class subfolders (data.path)")
    classes = {}
    for sub in sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")):
        videos = []
        for entry in sorted(p for p in sub.iterdir() if not p.name.startswith(".")):
            if entry.is_dir():
                if not frame_files(entry):
                    raise DataError(f"{entry}: frame folder holds no image")
                videos.append(entry)
            elif entry.suffix.lower() in VIDEO_SUFFIXES:
                videos.append(entry)
        if not videos:
            raise DataError(f"{sub}: class folder holds no video ({', '.join(sorted(VIDEO_SUFFIXES)[:5])}, ..., "
                            "or a folder of frames)")  # fmt: skip
        classes[sub.name] = videos
    if not classes:
        raise DataError(f"{folder} holds no class subfolders: expected <class>/<video> or <class>/<video>/<frame>")
    return classes


def load_videofolder(root: Path, download: bool, path: str | None = None) -> VideoFiles:
    """The videos of ``path``: ``train/`` and ``val/`` (or ``test/``) class folders, or the class folders (then
    validation and test videos are held out of them by count). ``root`` is unused: nothing is downloaded."""
    classes, train, test = split_folders(path, scan, "data=videofolder")
    return VideoFiles(classes, (Fold(train, test),))


class DecodedClips(LabelledFiles):
    """``(uint8 [frames, 3, canvas, canvas], label)`` per video, decoded when asked (in a loader worker).

    A clip is ``frames`` frames ``stride`` apart: from a random start in training, the middle one otherwise.
    Training crops a random area of the clip and flips it (the same crop and flip for every frame; VideoMAE's
    scale 0.08-1, aspect 3/4-4/3, Tong et al. 2022); evaluation resizes the short side to ``canvas`` and takes
    the centre. A video that cannot be decoded, or is shorter than a clip, is one line naming it (or skipped:
    :class:`~poslab.data.labelled_files.LabelledFiles`)."""

    kind = "video"

    def __init__(
        self,
        items: list[tuple[str, int]],
        frames: int,
        stride: int,
        canvas: int,
        train: bool,
        augment: bool = True,
        skip_unreadable: bool = False,
    ) -> None:
        from torchvision.transforms import v2  # deferred: torchvision, ~4.6 s

        super().__init__(items, skip_unreadable)
        self.frames, self.stride, self.train = frames, stride, train
        crop = [v2.RandomResizedCrop(canvas, scale=(0.08, 1.0), antialias=True), v2.RandomHorizontalFlip()]
        if not (train and augment):
            crop = [v2.Resize(canvas, antialias=True), v2.CenterCrop(canvas)]
        self.transform = v2.Compose(crop)  # a [T, C, H, W] tensor: one crop for all its frames

    def read(self, path: str) -> torch.Tensor:
        frames = read_clip(Path(path), self.frames, self.stride, self.train)
        return self.transform(torch.from_numpy(np.stack(frames)).permute(0, 3, 1, 2))


def read_clip(path: Path, frames: int, stride: int, random_start: bool) -> list[np.ndarray]:
    """The clip's frames as ``[H, W, 3]`` uint8 arrays; one line naming the video when it cannot be decoded,
    is shorter than a clip or changes size midway."""
    span = (frames - 1) * stride + 1

    def start(count: int) -> int:
        if count < span:
            raise DataError(f"{path}: {count} frames, shorter than a clip of {span} (data.frames={frames}, "
                            f"data.frame_stride={stride})")  # fmt: skip
        return int(torch.randint(count - span + 1, ())) if random_start else (count - span) // 2

    if path.is_dir():
        files = frame_files(path)
        first = start(len(files))
        clip = [np.asarray(read_rgb(f)) for f in files[first : first + span : stride]]
    else:
        clip = _decode(path, span, stride, start)
    if len({frame.shape for frame in clip}) > 1:
        raise DataError(f"{path}: frames of different sizes ({sorted({f.shape[:2] for f in clip})})")
    return clip


def _decode(path: Path, span: int, stride: int, start) -> list[np.ndarray]:
    """Decodes up to the clip's last frame, keeping the clip's frames only (a long video never sits in memory).
    The frame count is the container's, else its packets' (one a frame: Matroska and WebM record no count); a
    container that overstated it is decoded again with the count its frames gave."""
    import av  # deferred: where a run reads video files (a GPU check's machine may not have PyAV)

    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise DataError(f"{path}: not a readable video (no video stream)")
            stream = container.streams.video[0]
            count = stream.frames or sum(1 for packet in container.demux(stream) if packet.size)
        rgb = _reformatter(os.getpid())
        for _ in range(2):
            first, clip, seen = start(count), [], 0
            with av.open(str(path)) as container:
                for seen, frame in enumerate(container.decode(video=0), 1):
                    if seen > first and (seen - 1 - first) % stride == 0:
                        clip.append(rgb.reformat(frame, format="rgb24").to_ndarray())
                    if seen == first + span:
                        return clip
            count = seen  # fewer frames than the container said: these many
        raise DataError(f"{path}: not a readable video (its frame count changes between reads)")
    except av.FFmpegError as exc:  # corrupt, truncated, an unknown codec
        raise DataError(f"{path}: not a readable video ({exc.strerror or type(exc).__name__})") from None


@functools.cache
def _reformatter(pid: int):
    """One converter to RGB per process: it keeps FFmpeg's scaler between frames and videos, where
    ``frame.to_ndarray(format="rgb24")`` makes one per frame (3.5x slower on 320 x 240 frames here, same pixels).
    Keyed by process: a loader worker forked from a process that has one hung in it."""
    from av.video.reformatter import VideoReformatter  # deferred: as in _decode

    return VideoReformatter()


def write_video(path: Path, frames: np.ndarray, fps: int = 25) -> None:
    """``[T, H, W, 3]`` uint8 frames as an MPEG-4 Part 2 video (UCF101's codec family; even sizes)."""
    import av  # deferred: as in _decode

    with av.open(str(path), "w") as out:
        stream = out.add_stream("mpeg4", rate=fps)
        stream.height, stream.width = frames.shape[1:3]
        stream.pix_fmt = "yuv420p"
        for frame in frames:
            out.mux(stream.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgb24")))
        out.mux(stream.encode())


#: The generated clips' classes: a square moving one pixel a frame, (row, col) per frame.
MOTIONS = {"east": (0, 1), "north": (-1, 0), "west": (0, -1), "south": (1, 0)}


def moving_squares(motion: tuple[int, int], count: int, frames: int, size: int, rng) -> np.ndarray:
    """``count`` clips ``[N, frames, size, size, 3]`` of a bright 8-px square moving by ``motion`` each frame
    from a random start that keeps it off the walls, on noise (so a decoder's rounding cannot blank a frame)."""
    room = size - 8
    start = torch.from_numpy(rng.integers(0, room - frames + 1, (count, 2))).double()
    velocity = torch.tensor(motion, dtype=torch.float64).expand(count, 2)
    start = torch.where(velocity < 0, start + frames - 1, start)
    square = torch.full((count, 8, 8), 255, dtype=torch.uint8)
    clips = render(square, trajectories(start, velocity, frames, room), size).squeeze(2).numpy()
    noise = rng.integers(0, 40, clips.shape, dtype=np.uint8)
    return np.repeat(np.maximum(clips, noise)[..., None], 3, axis=-1)


def sample_videofolder(root: Path, frames: int = 16) -> list[str]:
    """``train/`` and ``val/`` of four motions, each class with video files (MPEG-4 in AVI) and frame folders
    (PNG frames named ``frame_1`` … ``frame_16``), of two sizes."""
    rng = np.random.default_rng(0)
    base = root / "videofolder"
    for split, count in (("train", 6), ("val", 2)):
        for c, (name, motion) in enumerate(MOTIONS.items()):
            folder = base / split / name
            folder.mkdir(parents=True)
            for k in range(count):
                clip = moving_squares(motion, 1, frames, 32 + 8 * (k % 2), rng)[0]
                if k % 2:
                    write_video(folder / f"{name}_{k}.avi", clip)
                    continue
                (folder / f"{name}_{k}").mkdir()
                for t, frame in enumerate(clip, 1):  # the first class's frames in grayscale
                    Image.fromarray(frame if c else frame[..., 0]).save(folder / f"{name}_{k}" / f"frame_{t}.png")
    return [f"data.path={base}", "data.canvas=32", "data.patch_size=8", "data.val_size=4", "data.augment=false"]


UCF101_URL = "https://www.crcv.ucf.edu/data/UCF101/"
#: SHA-256s as torchvision's dataset prototypes record them (UCF101's page publishes none)
UCF101_SPLITS = ("UCF101TrainTestSplits-RecognitionTask.zip", "ucfTrainTestlist",
                 "5c0d1a53b8ed364a2ac830a73f405e51bece7d98ce1254fd19ed4a36b224bd27")  # fmt: skip
UCF101_VIDEOS = ("UCF101.rar", "UCF-101", "ca8dfadb4c891cb11316f94d52b6b0ac2a11994e67a0cae227180cd160bd8e55")
#: Programs that unpack a RAR archive, with their arguments before (archive, destination).
RAR_TOOLS = {"unrar": ("x", "-o+", "-idq"), "7z": ("x", "-y", "-bd"), "bsdtar": ("-x", "-f")}


def unpack(archive: Path, into: Path, folder: str) -> None:
    """Unpacks ``archive``'s ``folder`` into ``into`` atomically: into a temporary folder beside it, then moved
    in whole (an interrupted unpack leaves nothing half-written)."""
    with tempfile.TemporaryDirectory(dir=into, prefix=f".{folder}-") as tmp:
        if archive.suffix == ".zip":
            with zipfile.ZipFile(archive) as z:
                z.extractall(tmp)
        else:
            tool = next((t for t in RAR_TOOLS if shutil.which(t)), None)
            if tool is None:
                raise DataError(f"unpacking {archive.name} needs one of {', '.join(RAR_TOOLS)} on PATH (e.g. apt "
                                f"install unrar), or unpack it yourself into {into / folder}")  # fmt: skip
            destination = {"7z": [f"-o{tmp}"], "bsdtar": ["-C", tmp]}.get(tool, [f"{tmp}/"])
            done = subprocess.run([tool, *RAR_TOOLS[tool], str(archive), *destination], capture_output=True, text=True)
            if done.returncode:
                raise DataError(f"{tool} could not unpack {archive}: {(done.stderr or done.stdout).strip()[:200]}")
        if not (Path(tmp) / folder).is_dir():
            raise DataError(f"{archive} holds no {folder}/ folder")
        try:
            os.replace(Path(tmp) / folder, into / folder)
        except OSError:
            if not (into / folder).is_dir():
                raise  # else another process (a rank of the same launch) moved its copy in first: ours goes


def load_ucf101(root: Path, download: bool, path: str | None = None) -> VideoFiles:
    """UCF101 (Soomro et al. 2012): 13,320 videos of 101 actions in ``<root>/UCF-101/<Action>/v_*.avi``, and its
    three official splits in ``<root>/ucfTrainTestlist/`` (``classInd.txt``, ``trainlist0k.txt``,
    ``testlist0k.txt``; ``data.fold=k``), which keep each group's clips (``_gNN_``) on one side. Downloaded,
    checksummed and unpacked when missing (the videos need ``unrar``, ``7z`` or ``bsdtar``)."""
    for archive, folder, sha256 in (UCF101_SPLITS, UCF101_VIDEOS):
        if download and not (root / folder).is_dir():
            root.mkdir(parents=True, exist_ok=True)
            unpack(fetch(UCF101_URL + archive, root / archive, sha256), root, folder)
        if not (root / folder).is_dir():
            raise DataError(f"UCF101 not found: {root / folder} is missing; set data.download=true or unpack "
                            f"{UCF101_URL + archive} into {root}")  # fmt: skip
    lists = root / UCF101_SPLITS[1]
    classes = []
    for number, line in enumerate(_lines(lists / "classInd.txt"), 1):
        index, _, name = line.partition(" ")
        if index != str(number) or not name:
            raise DataError(f"{lists / 'classInd.txt'}:{number}: expected '{number} <Action>', got {line!r}")
        classes.append(name)
    labels = {name: i for i, name in enumerate(classes)}
    folds = []
    for k in (1, 2, 3):
        folds.append(Fold(*(_ucf101_list(root, lists / f"{part}list0{k}.txt", labels) for part in ("train", "test"))))
    return VideoFiles(tuple(classes), tuple(folds))


def _lines(file: Path) -> list[str]:
    if not file.is_file():
        raise DataError(f"{file} is missing: unpack {UCF101_URL + UCF101_SPLITS[0]} into {file.parent.parent}")
    return [line.strip() for line in file.read_text().splitlines() if line.strip()]  # upstream's end in CRLF


def _ucf101_list(root: Path, file: Path, labels: dict[str, int]) -> list[tuple[str, int]]:
    """``<Action>/<video>.avi [label]`` lines: the videos and their classes (the folder's; a label, when the line
    has one, must agree)."""
    videos = []
    for number, line in enumerate(_lines(file), 1):
        name, _, label = line.partition(" ")
        action = name.split("/")[0]
        if action not in labels or (label and label != str(labels[action] + 1)):
            raise DataError(f"{file}:{number}: {line!r} names no class of classInd.txt as its folder and label")
        video = root / UCF101_VIDEOS[1] / name
        if not video.is_file():
            raise DataError(f"{file}:{number}: {video} is missing")
        videos.append((str(video), labels[action]))
    return videos


def sample_ucf101(root: Path, frames: int = 16) -> list[str]:
    """UCF101's layout with three actions, four groups of one clip each: fold k tests on group k (upstream: groups
    1-7, 8-14, 15-21); the lists end lines in CRLF, as upstream's do."""
    rng = np.random.default_rng(1)
    actions = {"ApplyEyeMakeup": (0, 1), "Archery": (1, 0), "YoYo": (0, -1)}
    lists = root / UCF101_SPLITS[1]
    lists.mkdir(parents=True)
    train = {k: [] for k in (1, 2, 3)}
    test = {k: [] for k in (1, 2, 3)}
    for c, (action, motion) in enumerate(actions.items(), 1):
        (root / UCF101_VIDEOS[1] / action).mkdir(parents=True)
        for group, clip in enumerate(moving_squares(motion, 4, frames, 32, rng), 1):
            name = f"{action}/v_{action}_g{group:02d}_c01.avi"
            write_video(root / UCF101_VIDEOS[1] / name, clip)
            for k in (1, 2, 3):
                if group == k:
                    test[k].append(name)  # the test lists carry no label
                else:
                    train[k].append(f"{name} {c}")
    (lists / "classInd.txt").write_bytes("".join(f"{c} {a}\r\n" for c, a in enumerate(actions, 1)).encode())
    for k in (1, 2, 3):
        (lists / f"trainlist0{k}.txt").write_bytes("".join(f"{line}\r\n" for line in train[k]).encode())
        (lists / f"testlist0{k}.txt").write_bytes("".join(f"{line}\r\n" for line in test[k]).encode())
    return ["data.canvas=32", "data.patch_size=8", "data.val_size=2", "data.augment=false"]


#: C3D's clips (Tran et al. 2015: 16 consecutive frames, 112-px crops) in VideoMAE's tokens (16-px patches,
#: tubelets of 2 frames); decoding runs in workers.
FILE_DEFAULTS = {
    "frames": 16, "frame_stride": 1, "canvas": 112, "patch_size": 16, "tubelet": 2,
    "num_workers": min(8, len(os.sched_getaffinity(0))),
    "eval_batch_size": 64,  # 16 x 3 x 112 x 112 uint8 clips: 39 MB a batch through the workers' shared memory
}  # fmt: skip
SOURCES["videofolder"] = VideoSource(load_videofolder, 3, IMAGENET_MEAN, IMAGENET_STD, defaults=FILE_DEFAULTS)
SAMPLES["videofolder"] = sample_videofolder
SOURCES["ucf101"] = VideoSource(load_ucf101, 3, IMAGENET_MEAN, IMAGENET_STD, defaults=FILE_DEFAULTS)
SAMPLES["ucf101"] = sample_ucf101
