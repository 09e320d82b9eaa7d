"""``poslab show ENCODER``: what an encoder does to positions, as numbers and one figure.

Every modality supplies the canonical positions to draw (its ``show``
function returns a :class:`Canvas`): text a causal sequence, vision a patch
grid, time series one week of hourly timestamps, video frames x a patch grid.
An encoder is drawn in the modality named by ``--modality``, by default the
simplest one that provides the positions it reads.

On a sequence, per hook the encoder uses (none, one or several):

* ``encode_input`` — the positions × dimensions table it adds to the tokens
  (Vaswani et al.'s sinusoid heatmap) and the position-similarity matrix
  ``p_i·p_j/√D``;
* ``rotate`` — the q·k score of a constant query and key against their
  relative distance, ``⟨R_0 1, R_d 1⟩/√Dh`` (RoFormer §3.4.3's long-term decay;
  Σ_k 2cos(θ_k d)/√Dh for RoPE);
* ``attention_bias`` — the per-head ``[L, L]`` bias matrix (keys after the
  query, which the causal model never reads, are null / blank).

On a grid, the position-only score of every pair of tokens
(:func:`~poslab.evaluation.similarity.position_similarity`, whatever the
hooks), drawn the way the ViT paper draws learned embeddings (Dosovitskiy et
al. 2021, Fig. 7): for each patch, its score with every other patch as a small
grid, the panels laid out on the grid itself. Larger layouts (a week of hours,
frames x patches) show one reference token's scores against every other.
The encoder is built from its YAML defaults plus ``key=value`` options, with
the facts that modality's data gives it. Learned encoders are shown as initialised.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from poslab.config.composition import compose, to_dict
from poslab.config.files import modality_positions
from poslab.encoders import build_encoder_in_context, encoder_class
from poslab.encoders.base import PositionEncoder
from poslab.errors import ConfigError, PoslabError
from poslab.evaluation.similarity import position_similarity
from poslab.modalities.registry import Canvas, available_modalities, get_modality

#: Grids with at most this many tokens are drawn as a grid of grids (ViT Fig. 7); larger ones by one reference token.
GRID_OF_GRIDS_MAX = 64


def default_modality(name: str) -> str:
    """Where ``poslab show`` draws an encoder: the modality declaring the field it reads as the one it shows
    (``Modality.shows``); else (an encoder reading no field, a field no modality declares) the simplest of
    those it fits, providing the fewest position fields, showing modalities first, then by name."""

    reads = encoder_class(name).reads  # an unknown encoder: its own one-line error
    fitting = []
    for modality in available_modalities():
        try:
            encoder_class(name, modality)
        except ConfigError:
            continue
        shows = get_modality(modality).shows
        if reads is not None and reads in shows:
            return modality
        fitting.append((not shows, len(modality_positions(modality)), modality))
    if not fitting:
        raise ConfigError(f"encoder '{name}' fits no modality")
    return min(fitting)[2]


def canvas_of(modality: str, length: int | None) -> Canvas:

    show = get_modality(modality).piece("show")
    if show is None:
        raise ConfigError(f"modality '{modality}' has nothing for poslab show to draw")
    return show(length)


def build(name: str, dim: int, heads: int, canvas: Canvas, options: list[str], modality: str) -> PositionEncoder:
    """The encoder as a run of ``modality`` composes it (YAML defaults, then ``key=value`` options, validated:
    an unknown encoder or option is the config's own one-line error naming the choices)."""

    encoder = to_dict(compose([f"modality={modality}", f"encoder={name}", *(f"encoder.{o}" for o in options)]).encoder)
    return build_encoder_in_context(
        encoder.pop("name"), dim=dim, num_heads=heads, options=encoder, context=canvas.context
    )


nan = float("nan")


@torch.no_grad()
def describe(encoder: PositionEncoder, canvas: Canvas, modality: str = "") -> dict[str, Any]:
    """The numbers behind the figure, as plain lists (``--json``)."""

    length, pos = canvas.length, canvas.positions
    hooks = encoder.hooks()
    out: dict[str, Any] = {
        "encoder": encoder.name,
        "modality": modality,
        "hooks": list(hooks),
        "dim": encoder.dim,
        "heads": encoder.num_heads,
        "length": length,
        "learned": any(p.requires_grad for p in encoder.parameters()),
        "layout": None if canvas.layout is None else {"shape": list(canvas.layout), "axes": list(canvas.axes)},
        "reference": canvas.reference,
        "caption": canvas.caption,
    }
    similarity = position_similarity(encoder, pos, length)  # the run's own figure
    if canvas.layout is not None:
        out["similarity"] = similarity.tolist()
        return out
    if "encode_input" in hooks or not hooks:  # none: an all-zero similarity says "nothing" in numbers
        out["similarity"] = similarity.tolist()
    if "encode_input" in hooks:
        out["table"] = encoder.encode_input(torch.zeros(1, length, encoder.dim), pos)[0].float().tolist()
    if "rotate" in hooks:
        ones = torch.ones(1, encoder.num_heads, length, encoder.head_dim)
        queries, keys = encoder.rotate_query(ones, pos).float(), encoder.rotate_key(ones, pos).float()
        # the query at the last position, keys d before it (as a causal model reads them)
        score = (queries[:, :, -1:] * keys.flip(-2)).sum(-1) / math.sqrt(queries.shape[-1])  # as attention scales
        out["score_vs_distance"] = {"distance": list(range(length)), "score": score.mean(dim=(0, 1)).tolist()}
    if "attention_bias" in hooks:
        bias = encoder.attention_bias(pos, pos)
        if bias is not None:
            bias = bias.float().reshape(-1, length, length)
            if canvas.causal:  # the causal model never reads keys after the query: null there
                bias = bias.masked_fill(torch.ones(length, length).triu(1).bool(), nan)
            out["bias"] = _nan_as_null(bias)
    if "content_bias" in hooks:  # a bias from the content: drawn for seeded random queries and keys
        out["content_bias"] = _content_bias(encoder, length, canvas.causal)
    if "attention_weights" in hooks:  # weights in place of the softmax: drawn where every logit is equal
        out["weights"] = _equal_logit_weights(encoder, length, canvas.causal)
    if not any(k in out for k in ("similarity", "table", "score_vs_distance", "bias", "content_bias", "weights")):
        out["similarity"] = similarity.tolist()
    return out


def _content_bias(encoder: PositionEncoder, length: int, causal: bool) -> list:
    generator = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 1, encoder.num_heads, length, encoder.head_dim, generator=generator)
    logits = q @ k.transpose(-1, -2) / math.sqrt(encoder.head_dim)
    future = torch.ones(length, length).triu(1).bool()
    if causal:
        logits = logits.masked_fill(future, float("-inf"))
    bias = encoder.content_bias(q, k, logits)[0].float()
    if causal:
        bias = bias.masked_fill(future, nan)
    return _nan_as_null(bias)


def _equal_logit_weights(encoder: PositionEncoder, length: int, causal: bool) -> list:
    logits = torch.zeros(1, encoder.num_heads, length, length)
    future = torch.ones(length, length).triu(1).bool()
    if causal:
        logits = logits.masked_fill(future, float("-inf"))
    weights = encoder.attention_weights(logits)[0].float()
    return _nan_as_null(weights.masked_fill(future, nan) if causal else weights)


def _nan_as_null(bias: torch.Tensor) -> list:
    """``[H, L, L]`` as nested lists with NaN (keys a causal query never reads) as null in the JSON."""
    return [[[None if math.isnan(v) else v for v in row] for row in head] for head in bias.tolist()]


def figure(numbers: dict[str, Any]):
    """One row of panels for what :func:`describe` measured on a sequence; a grid figure on a layout."""

    from poslab.track.plots import plt  # deferred: matplotlib, ~0.8 s

    if numbers.get("layout"):
        return grid_figure(numbers)

    panels = []  # (title, matrix to draw, or None for the distance curve)
    if "table" in numbers:
        panels.append(("positions x dimensions (added to the tokens)", numbers["table"]))
        panels.append(("position similarity (p_i · p_j / √D)", numbers["similarity"]))
    if "score_vs_distance" in numbers:
        panels.append(("q·k of a constant q, k vs distance", None))
    panels += [(f"bias, head {h}", matrix) for h, matrix in enumerate(numbers.get("bias", [])[:8])]
    panels += [(f"content bias, head {h} (random q, k)", m) for h, m in enumerate(numbers.get("content_bias", [])[:8])]
    panels += [(f"weights at equal logits, head {h}", m) for h, m in enumerate(numbers.get("weights", [])[:1])]
    if not panels:
        panels.append(("no position information", numbers["similarity"]))
    fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels), 3.4), squeeze=False)
    for ax, (title, matrix) in zip(axes[0], panels, strict=True):
        image = None
        if matrix is None:
            curve = numbers["score_vs_distance"]
            ax.plot(curve["distance"], curve["score"])
            ax.set(xlabel="relative distance", ylabel="score")
        elif matrix is numbers.get("table"):
            image = ax.imshow(matrix, cmap="RdBu_r", aspect="auto", vmin=-1, vmax=1)
            ax.set(xlabel="dimension", ylabel="position")
        else:
            image = ax.imshow(np.array(matrix, dtype=float), cmap="viridis")  # null -> NaN: blank
            ax.set(xlabel="key position j", ylabel="query position i")
        if image is not None:
            fig.colorbar(image, ax=ax, fraction=0.046)
        ax.set_title(title, fontsize=9)
    fig.suptitle(f"{_title(numbers)}, {numbers['length']} positions")
    fig.tight_layout()
    return fig


def _title(numbers: dict[str, Any]) -> str:
    state = "learned, shown as initialised" if numbers["learned"] else "fixed"
    return f"{numbers['encoder']} ({state}) on {numbers['modality']}: dim {numbers['dim']}, {numbers['heads']} heads"


def grid_figure(numbers: dict[str, Any]):
    """Position-only scores on a token grid: a grid of grids (ViT Fig. 7), or one reference token's scores."""

    from poslab.track.plots import plt  # deferred: matplotlib, ~0.8 s

    shape, axes_names = numbers["layout"]["shape"], numbers["layout"]["axes"]
    scores = np.array(numbers["similarity"], dtype=float)
    if len(shape) == 2 and numbers["length"] <= GRID_OF_GRIDS_MAX:
        rows, cols = shape
        fig, axes = plt.subplots(rows, cols, figsize=(0.9 * cols + 1.2, 0.9 * rows + 0.8), squeeze=False)
        low, high = scores.min(), scores.max()
        for index, ax in enumerate(axes.flat):
            image = ax.imshow(scores[index].reshape(rows, cols), cmap="viridis", vmin=low, vmax=high)
            ax.set_xticks([])
            ax.set_yticks([])
        fig.supxlabel(f"{axes_names[1]} of the patch", fontsize=9)
        fig.supylabel(f"{axes_names[0]} of the patch", fontsize=9)
        fig.colorbar(image, ax=axes.ravel().tolist(), fraction=0.03, label="position-only score")
        fig.suptitle(f"{_title(numbers)}\neach panel: one patch's score with every patch", fontsize=9)
        return fig
    reference = scores[numbers["reference"]]
    planes = reference.reshape(shape) if len(shape) == 3 else reference.reshape(1, *shape)
    columns = 1 + min(len(planes), 4)  # the full matrix, then up to 4 planes (frames) a row
    rows = -(-len(planes) // 4)
    fig, axes = plt.subplots(
        rows, columns, figsize=(2.6 * columns + 1.0, 2.6 * rows + 0.6), squeeze=False, layout="constrained"
    )
    image = axes[0, 0].imshow(scores, cmap="viridis")
    axes[0, 0].set(title="score(i, j), token order", xlabel="key token j", ylabel="query token i")
    fig.colorbar(image, ax=axes[0, 0], fraction=0.046)
    for ax in axes[1:, 0]:
        ax.axis("off")
    low, high = reference.min(), reference.max()
    for index, plane in enumerate(planes):
        ax = axes[index // 4, 1 + index % 4]
        image = ax.imshow(plane, cmap="viridis", vmin=low, vmax=high, aspect="auto")
        name = f"{axes_names[0]} {index}" if len(shape) == 3 else "score with the reference token"
        ax.set_title(name, fontsize=9)
        ax.set_xticks(range(plane.shape[1]) if plane.shape[1] <= 8 else [])
        ax.set_yticks(range(plane.shape[0]) if plane.shape[0] <= 8 else [])
        if index % 4 == 0:
            ax.set_ylabel(axes_names[-2])
        if index // 4 == rows - 1:
            ax.set_xlabel(axes_names[-1])
    for ax in axes[:, 1:].flat:
        if not ax.images:  # a last row with fewer frames
            ax.axis("off")
    fig.colorbar(image, ax=axes[:, 1:].ravel().tolist(), fraction=0.02, label="position-only score")
    fig.suptitle(f"{_title(numbers)}\n{numbers['caption']}", fontsize=9)
    return fig


def main(argv: list[str] | None = None) -> int:

    from poslab.track import plots  # deferred: matplotlib, ~0.8 s

    parser = argparse.ArgumentParser(prog="poslab show", description=__doc__.splitlines()[0])
    parser.add_argument("encoder", help="any registered encoder (poslab list)")
    parser.add_argument("options", nargs="*", metavar="key=value", help="encoder options, e.g. layout=interleaved")
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--length", type=int, default=None, help="positions drawn (default: the modality's own)")
    parser.add_argument("--modality", default=None, help="draw on this modality's positions (default: the simplest)")
    parser.add_argument("--out", type=Path, default=None, help="PNG path (default: reports/show/<encoder>.png)")
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON on stdout")
    args = parser.parse_intermixed_args(argv)
    try:
        malformed = [o for o in args.options if "=" not in o]
        if malformed:
            raise PoslabError(f"encoder options are key=value, got '{malformed[0]}'")
        modality = args.modality or default_modality(args.encoder)
        canvas = canvas_of(modality, args.length)
        encoder = build(args.encoder, args.dim, args.heads, canvas, args.options, modality)
        numbers = describe(encoder, canvas, modality)
    except (PoslabError, ValueError) as exc:
        print(f"poslab show: error: {exc}", file=sys.stderr)
        return 2
    out = args.out or Path("reports/show") / f"{args.encoder}.png"
    fig = figure(numbers)
    plots.save_figure(fig, out)
    plots.close(fig)
    if args.json:
        print(json.dumps(numbers))
    print(f"figure: {out}", file=sys.stderr if args.json else sys.stdout)
    return 0
