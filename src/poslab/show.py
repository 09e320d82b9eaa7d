"""``poslab show ENCODER``: what a 1D encoder does to positions, as numbers and one figure.

Per hook the encoder uses (none, one or several):

* ``encode_input`` — the positions × dimensions table it adds to the tokens
  (Vaswani et al.'s sinusoid heatmap) and the position-similarity matrix
  ``p_i·p_j/√D``;
* ``rotate`` — the q·k score of a constant query and key against their
  relative distance, ``⟨R_0 1, R_d 1⟩/√Dh`` (RoFormer §3.4.3's long-term decay;
  Σ_k 2cos(θ_k d)/√Dh for RoPE);
* ``attention_bias`` — the per-head ``[L, L]`` bias matrix (keys after the
  query, which the causal model never reads, are null / blank).

The encoder is built from its YAML defaults plus ``key=value`` options, in its
causal (text) form. Learned encoders are shown as initialised.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from poslab.encoders.base import PositionEncoder


def build(name: str, dim: int, heads: int, length: int, options: list[str]) -> PositionEncoder:
    """The encoder as a ``modality=text`` run composes it (YAML defaults, then ``key=value`` options, validated:
    an unknown encoder or option is the config's own one-line error naming the choices)."""
    from poslab.config import compose, to_dict
    from poslab.encoders import build_encoder_in_context

    encoder = to_dict(compose(["modality=text", f"encoder={name}", *(f"encoder.{o}" for o in options)]).encoder)
    context = {"max_len": length, "bidirectional": False}  # the causal text model's facts
    return build_encoder_in_context(encoder.pop("name"), dim=dim, num_heads=heads, options=encoder, context=context)


nan = float("nan")


@torch.no_grad()
def describe(encoder: PositionEncoder, length: int) -> dict[str, Any]:
    """The numbers behind the figure, as plain lists (``--json``)."""
    from poslab.evaluation.similarity import position_similarity

    pos = torch.arange(length)
    hooks = encoder.hooks()
    out: dict[str, Any] = {
        "encoder": encoder.name,
        "hooks": list(hooks),
        "dim": encoder.dim,
        "heads": encoder.num_heads,
        "length": length,
        "learned": any(p.requires_grad for p in encoder.parameters()),
    }
    if "encode_input" in hooks or not hooks:  # none: an all-zero similarity says "nothing" in numbers
        out["similarity"] = position_similarity(encoder, pos, length).tolist()  # the run's own figure
    if "encode_input" in hooks:
        out["table"] = encoder.encode_input(torch.zeros(1, length, encoder.dim), pos)[0].float().tolist()
    if "rotate" in hooks:
        ones = torch.ones(1, encoder.num_heads, length, encoder.head_dim)
        rotated = encoder.rotate(ones, pos).float()
        score = (rotated[:, :, :1] * rotated).sum(-1) / math.sqrt(encoder.head_dim)  # query at 0, keys at d
        out["score_vs_distance"] = {"distance": list(range(length)), "score": score.mean(dim=(0, 1)).tolist()}
    if "attention_bias" in hooks:
        bias = encoder.attention_bias(pos, pos)
        if bias is not None:  # the causal model never reads keys after the query: null there
            bias = bias.float().reshape(-1, length, length).masked_fill(torch.ones(length, length).triu(1).bool(), nan)
            out["bias"] = [[[None if math.isnan(v) else v for v in row] for row in head] for head in bias.tolist()]
    return out


def figure(numbers: dict[str, Any]):
    """One row of panels for what :func:`describe` measured."""
    import numpy as np

    from poslab.plots import plt

    panels = []  # (title, matrix to draw, or None for the distance curve)
    if "table" in numbers:
        panels.append(("positions x dimensions (added to the tokens)", numbers["table"]))
        panels.append(("position similarity (p_i · p_j / √D)", numbers["similarity"]))
    if "score_vs_distance" in numbers:
        panels.append(("q·k of a constant q, k vs distance", None))
    panels += [(f"bias, head {h}", matrix) for h, matrix in enumerate(numbers.get("bias", [])[:8])]
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
    state = "learned, shown as initialised" if numbers["learned"] else "fixed"
    fig.suptitle(f"{numbers['encoder']} ({state}): dim {numbers['dim']}, {numbers['heads']} heads, "
                 f"{numbers['length']} positions")  # fmt: skip
    fig.tight_layout()
    return fig


def main(argv: list[str] | None = None) -> int:
    import argparse
    import json
    import sys

    from poslab import plots
    from poslab.errors import PoslabError

    parser = argparse.ArgumentParser(prog="poslab show", description=__doc__.splitlines()[0])
    parser.add_argument("encoder", help="a 1D encoder (poslab list text)")
    parser.add_argument("options", nargs="*", metavar="key=value", help="encoder options, e.g. layout=interleaved")
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--length", type=int, default=64, help="positions drawn")
    parser.add_argument("--out", type=Path, default=None, help="PNG path (default: reports/show/<encoder>.png)")
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON on stdout")
    args = parser.parse_intermixed_args(argv)
    try:
        malformed = [o for o in args.options if "=" not in o]
        if malformed:
            raise PoslabError(f"encoder options are key=value, got '{malformed[0]}'")
        encoder = build(args.encoder, args.dim, args.heads, args.length, args.options)
        numbers = describe(encoder, args.length)
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
