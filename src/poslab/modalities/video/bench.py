"""``make bench-videos``: does decoding videos in the loader's workers keep the space-time ViT fed?

On ``--videos`` generated UCF101-sized videos (320 x 240, 25 frames/s, MPEG-4 in AVI, ``--length`` frames: a
camera panning over a blurred texture, so they compress like footage) in 10 class folders, and the same
videos as folders of JPEG frames: samples/s the ``videofolder`` loader delivers (decode, RGB, a random crop of
a ``--frames``-frame clip to ``--canvas`` px, flip, batches of ``--batch``) with 0 and ``--workers`` worker
processes, against the samples/s of CPU training steps (forward, backward, AdamW) of the video modality's
model on those clips (the folder sources' 16-px patches and tubelets of 2 frames). The ratio is the
headroom (target: at least 3x).

Prints one table (Markdown) and writes ``reports/bench/videos.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageFilter
from torch.utils.data import DataLoader

from poslab.config.composition import compose
from poslab.config.options import pick_options
from poslab.encoders import build_encoder_in_context
from poslab.modalities.video.data import clip_positions
from poslab.modalities.video.model import VideoViT
from poslab.modalities.video.sources.folders import DecodedClips, load_videofolder, write_video
from poslab.modalities.vision.bench import rate
from poslab.modalities.vision.model import ViT
from poslab.track.tables import markdown_table


def write_videos(root: Path, videos: int, length: int, seed: int = 0) -> tuple[Path, Path]:
    """``videos`` AVIs of 320 x 240 px panning over a blurred texture, and the same frames as JPEG folders."""
    rng = np.random.default_rng(seed)
    files, frames_root = root / "avi", root / "frames"
    for i in range(videos):
        texture = np.asarray(
            Image.fromarray(rng.integers(0, 255, (240 + length, 320 + length, 3), dtype=np.uint8)).filter(
                ImageFilter.GaussianBlur(4)
            )
        )
        clip = np.stack([texture[t : t + 240, t : t + 320] for t in range(length)])  # a diagonal pan
        (files / f"class{i % 10}").mkdir(parents=True, exist_ok=True)
        write_video(files / f"class{i % 10}" / f"v{i}.avi", clip)
        folder = frames_root / f"class{i % 10}" / f"v{i}"
        folder.mkdir(parents=True)
        for t, frame in enumerate(clip, 1):
            Image.fromarray(frame).save(folder / f"frame_{t:05d}.jpg", quality=90)
    return files, frames_root


def model_rate(frames: int, canvas: int, batch: int, steps: int, preset: str | None) -> tuple[float, dict]:
    """Samples/s of CPU training steps of the video model (the modality's, or a model preset) on clips of
    ``frames`` x ``canvas`` px (the folder sources' patches and tubelets)."""
    cfg = compose(["modality=video", "data=videofolder", "encoder=rope3d", f"data.frames={frames}",
                   f"data.canvas={canvas}", *([f"model={preset}"] if preset else [])])  # fmt: skip
    data, model = cfg.data, cfg.model
    frames, cells = data.frames // data.tubelet, data.canvas // data.patch_size
    encoder = build_encoder_in_context("rope3d", dim=model.dim, num_heads=model.num_heads, options={},
                                       context={"grid_size": (cells, cells), "frames": frames})  # fmt: skip
    vit = VideoViT(encoder, in_chans=3, num_classes=101, patch_size=data.patch_size, tubelet=data.tubelet,
                   **pick_options(ViT, model, ViT.SUPPLIED))  # fmt: skip
    optimizer = torch.optim.AdamW(vit.parameters(), lr=1e-4)
    pos = clip_positions(frames, (cells, cells))
    x, y = torch.randn(batch, data.frames, 3, data.canvas, data.canvas), torch.randint(0, 101, (batch,))
    elapsed = 0.0
    for step in range(steps + 1):
        start = time.perf_counter()
        torch.nn.functional.cross_entropy(vit(x, pos), y).backward()
        optimizer.step(), optimizer.zero_grad()
        if step:  # the first step warms the allocator up
            elapsed += time.perf_counter() - start
    shape = {"frames": data.frames, "canvas": data.canvas, "tokens": frames * cells * cells, "dim": model.dim,
             "depth": model.depth}  # fmt: skip
    return batch * steps / elapsed, shape


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="poslab.modalities.video.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--videos", type=int, default=128)
    parser.add_argument("--length", type=int, default=64, help="frames per video")
    parser.add_argument("--frames", type=int, default=16, help="frames per clip")
    parser.add_argument("--canvas", type=int, default=112, help="the crop the model takes")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3, help="timed training steps")
    parser.add_argument("--model", default=None, help="a model preset (vit-tiny, ...); default: the modality's")
    parser.add_argument("--out", default="reports/bench/videos.json")
    args = parser.parse_args(argv)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for kind, folder in zip(("avi", "frames"), write_videos(Path(tmp), args.videos, args.length), strict=True):
            items = load_videofolder(Path(tmp), False, str(folder)).folds[0].train
            for workers in sorted({0, args.workers}):
                clips = DecodedClips(items, args.frames, 1, args.canvas, train=True)
                loader = DataLoader(clips, batch_size=args.batch, shuffle=True, num_workers=workers)
                results[f"{kind}_{workers}_workers"] = rate(loader)
    results["model"], shape = model_rate(args.frames, args.canvas, args.batch, args.steps, args.model)
    rows = []
    for kind, name in (("avi", "AVI (MPEG-4)"), ("frames", "JPEG frame folders")):
        for w in sorted({0, args.workers}):
            got = results[f"{kind}_{w}_workers"]
            rows.append([f"decode {name}", f"{w} workers", f"{got:,.1f}", f"{got / results['model']:.1f}x the model"])
    model = f"{args.model or 'video'} ({shape['depth']} x {shape['dim']}), {shape['tokens']} tokens"
    rows.append([f"model {model}", f"batch {args.batch}, CPU",
                 f"{results['model']:,.1f}", ""])  # fmt: skip
    print("\n".join(markdown_table(["measure", "setting", "clips/s", "ratio"], rows)))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "model": shape, "clips_per_s": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
