"""``make bench-images``: does decoding an image folder in the loader's workers keep a ViT fed, and is holding a
small set in memory worth it?

On ``--images`` generated JPEGs of ``--source`` px in 10 class folders:

1. **decode**: samples/s the ``imagefolder`` loader delivers (decode, RGB, DeiT's random crop to ``--size``, flip,
   batches of ``--batch``) with 0 and ``--workers`` worker processes, against the samples/s one CPU training
   step of the ViT preset ``--model`` takes at ``--size`` px in 16-px patches (forward, backward, AdamW): the
   ratio is the headroom (target: at least 3x).
2. **small sets**: a CIFAR-sized set (32-px PNGs) read both ways — decoded from files, and as the built-in sets
   are, one uint8 tensor in memory — samples/s per loader.

Prints one table (Markdown) and writes ``reports/bench/images.json``.
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
from torch.utils.data import DataLoader, TensorDataset

from poslab.config.composition import compose
from poslab.config.options import pick_options
from poslab.encoders import build_encoder_in_context
from poslab.modalities.vision.data import patch_coordinates
from poslab.modalities.vision.model import ViT
from poslab.modalities.vision.sources.folders import DecodedImages, load_imagefolder
from poslab.positions import Positions
from poslab.track.tables import markdown_table


def write_folder(root: Path, images: int, size: int, suffix: str, seed: int = 0) -> Path:
    """``images`` smooth random images of ``size`` px (noise blurred, so they compress like photographs)."""
    rng = np.random.default_rng(seed)
    for i in range(images):
        folder = root / f"class{i % 10}"
        folder.mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 255, (size, size * 4 // 3, 3), dtype=np.uint8)
        Image.fromarray(pixels).filter(ImageFilter.GaussianBlur(3)).save(folder / f"{i}.{suffix}", quality=90)
    return root


def rate(loader, passes: int = 1) -> float:
    """Samples per second over ``passes`` full passes (the first batch, which starts the workers, included)."""
    start, seen = time.perf_counter(), 0
    for _ in range(passes):
        for images, _labels in loader:
            seen += len(images)
    return seen / (time.perf_counter() - start)


def model_rate(preset: str, size: int, batch: int, steps: int) -> float:
    """Samples/s of CPU training steps of the ViT preset at ``size`` px in 16-px patches (after one warm-up)."""
    model_cfg = compose(["modality=vision", f"model={preset}", "encoder=rope2d"]).model
    grid = size // 16
    encoder = build_encoder_in_context("rope2d", dim=model_cfg.dim, num_heads=model_cfg.num_heads, options={},
                                       context={"grid_size": (grid, grid)})  # fmt: skip
    vit = ViT(encoder, in_chans=3, num_classes=1000, patch_size=16, **pick_options(ViT, model_cfg, ViT.SUPPLIED))
    optimizer = torch.optim.AdamW(vit.parameters(), lr=1e-4)
    pos = Positions(coords=patch_coordinates((grid, grid)), coords_grid=(grid, grid))
    x, y = torch.randn(batch, 3, size, size), torch.randint(0, 1000, (batch,))
    elapsed = 0.0
    for step in range(steps + 1):
        start = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(vit(x, pos), y)
        loss.backward()
        optimizer.step(), optimizer.zero_grad()
        if step:  # the first step warms the allocator up
            elapsed += time.perf_counter() - start
    return batch * steps / elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="poslab.modalities.vision.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=512, help="JPEGs in the folder")
    parser.add_argument("--source", type=int, default=300, help="their height in px (4:3)")
    parser.add_argument("--size", type=int, default=224, help="the crop the model takes")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--model", default="vit-tiny", help="a vision model preset")
    parser.add_argument("--steps", type=int, default=3, help="timed training steps")
    parser.add_argument("--small", type=int, default=2000, help="images in the CIFAR-sized set")
    parser.add_argument("--out", default="reports/bench/images.json")
    args = parser.parse_args(argv)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = write_folder(Path(tmp) / "large", args.images, args.source, "jpg")
        files = load_imagefolder(Path(tmp), False, str(folder)).train
        for workers in sorted({0, args.workers}):
            loader = DataLoader(DecodedImages(files, args.size, train=True), batch_size=args.batch, shuffle=True,
                                num_workers=workers)  # fmt: skip
            results[f"decode_{workers}_workers"] = rate(loader)
        results["model"] = model_rate(args.model, args.size, args.batch, args.steps)
        small = write_folder(Path(tmp) / "small", args.small, 32, "png", seed=1)
        small_files = load_imagefolder(Path(tmp), False, str(small)).train
        for workers in sorted({0, args.workers}):
            loader = DataLoader(DecodedImages(small_files, 32, train=False), batch_size=128, num_workers=workers)
            results[f"small_decode_{workers}_workers"] = rate(loader)
        tensors = torch.stack([DecodedImages(small_files, 32, train=False)[i][0] for i in range(len(small_files))])
        memory = DataLoader(TensorDataset(tensors, torch.zeros(len(tensors), dtype=torch.long)), batch_size=128)
        results["small_in_memory"] = rate(memory, passes=5)
    rows = [
        [f"decode {args.source}-px JPEGs -> {args.size}", f"{w} workers", f"{results[f'decode_{w}_workers']:,.0f}",
         f"{results[f'decode_{w}_workers'] / results['model']:.1f}x the model"]
        for w in sorted({0, args.workers})
    ]  # fmt: skip
    rows.append([f"model {args.model} at {args.size} px", f"batch {args.batch}, CPU", f"{results['model']:,.1f}", ""])
    rows += [
        ["decode 32-px PNGs", f"{w} workers", f"{results[f'small_decode_{w}_workers']:,.0f}", ""]
        for w in sorted({0, args.workers})
    ]
    best = max(results[f"small_decode_{w}_workers"] for w in sorted({0, args.workers}))
    rows.append(["32-px set in memory", "one uint8 tensor", f"{results['small_in_memory']:,.0f}",
                 f"{results['small_in_memory'] / best:.0f}x decoding"])  # fmt: skip
    print("\n".join(markdown_table(["measure", "setting", "samples/s", "ratio"], rows)))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "samples_per_s": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
