"""ImageNet top-1 by image size, poslab's beside the published: RoPE-ViT's DeiT-III rows (Heo et al. 2024, the
naver-ai/rope-vit README's table: trained at 224 px, tested at 224 and 384), for the runs whose model has a
published row's width (``model=vit-small``: DeiT-S, 384; ``vit-base``: DeiT-B, 768).

The numbers are data (``published.csv``: model, encoder, width, image size, top-1, and the source of each),
not code. RoPE-ViT tests its rotary models at 384 on the larger grid's own indices (``raw``) and resamples the
absolute table (``rescaled``, as poslab's ``learned2d`` does): poslab's rows give both.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from poslab.modalities.vision.report import accuracy_by_size
from poslab.track.tables import markdown_table

PUBLISHED = Path(__file__).with_name("published.csv")


@dataclass(frozen=True)
class Published:
    model: str
    encoder: str
    source: str
    top1: dict[int, float]  # image size -> top-1 (%)


def published(width: int, path: Path = PUBLISHED) -> list[Published]:
    """The published rows of models of ``width``, in the file's order."""
    rows: dict[tuple[str, str], Published] = {}
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            if int(row["width"]) == width:
                key = (row["model"], row["encoder"])
                found = rows.setdefault(key, Published(row["model"], row["encoder"], row["source"], {}))
                found.top1[int(row["image_size"])] = float(row["top1"])
    return list(rows.values())


def cells(values: dict[int, float], sizes: list[int]) -> list[str]:
    return [f"{values[s]:.1f}" if s in values else "—" for s in sizes]


def tables(groups: Sequence) -> list[str]:
    """For each model width with published rows: poslab's top-1 (%) at each image size, raw and rescaled
    coordinates, then the published rows at the same sizes, with their sources."""
    lines = []
    for width in sorted({g.runs[0]["config"]["model"]["dim"] for g in groups}):
        rows = published(width)
        mine = [g for g in groups if g.runs[0]["config"]["model"]["dim"] == width]
        curves = {(g.label, mode): accuracy_by_size(g, mode) for g in mine for mode in ("rescaled", "raw")}
        sizes = sorted({size for curve in curves.values() for size in curve} | {s for r in rows for s in r.top1})
        if not rows or not any(curves.values()):
            continue

        body = [[f"`{label}` ({mode})", "poslab", *cells({s: 100 * a for s, a in curve.items()}, sizes)]
                for (label, mode), curve in curves.items() if curve]  # fmt: skip
        body += [[f"{r.model} `{r.encoder}`", r.source, *cells(r.top1, sizes)] for r in rows]
        lines += [f"**ImageNet top-1 (%) by image size, width {width}**, poslab's beside the published:", ""]
        lines += [*markdown_table(["encoder (coordinates)", "source", *(f"{s} px" for s in sizes)], body), ""]
    return lines
