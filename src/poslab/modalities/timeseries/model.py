"""Transformer forecaster on the shared backbone, in three token layouts.

All layouts are channel-independent (PatchTST, Nie et al. 2023): each channel
is its own univariate series through the same weights. Optional RevIN-style
instance normalisation (Kim et al. 2022) removes each window's mean and scale
and puts them back on the forecast.

* ``step`` — one token per past step, a flatten head to the horizon.
* ``patch`` — PatchTST: patches of ``patch_len`` every ``stride`` steps (the
  series padded at the end by repeating its last value ``stride`` times); a
  patch's position is its first step's index and timestamp; a flatten head.
  The flatten heads are position-specific: order leaks into the model even
  with ``encoder=none``.
* ``query`` — the past as patches (as in ``patch``) plus one *query* token
  per future step that carries only its positions (step index, timestamp:
  known in advance, like Informer's decoder placeholders). Queries attend to
  the past and to themselves; a per-token head reads each query's value.
  Nothing depends on the lookback or horizon length, so the model runs at
  other lengths (and on irregularly sampled pasts).

``highway=True`` (step / patch layouts) adds a linear map from the lookback to
the horizon beside the transformer — LSTNet's autoregressive highway (Lai et
al. 2018): the transformer then models what a linear forecaster misses.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Literal

import torch
from torch import nn

from poslab.config.ranges import AT_LEAST_1, Depth, Dropout, Heads, MlpRatio, Width
from poslab.encoders.base import PositionEncoder
from poslab.errors import ConfigError, PoslabError
from poslab.nn.backbone import Transformer
from poslab.positions import Positions

LAYOUTS = ("step", "patch", "query")


def per_channel(pos: Positions, channels: int) -> Positions:
    """Repeat per-window positions for each channel (channel-independent batches)."""
    times = (
        pos.times.repeat_interleave(channels, dim=0) if pos.times is not None and pos.times.dim() == 2 else pos.times
    )
    steps = (
        pos.steps.repeat_interleave(channels, dim=0) if pos.steps is not None and pos.steps.dim() == 2 else pos.steps
    )
    return replace(pos, steps=steps, times=times)


def query_mask(past: int, future: int, device=None) -> torch.Tensor:
    """Past tokens see the past; each query sees the past and itself."""
    total = past + future
    allowed = torch.zeros(total, total, dtype=torch.bool, device=device)
    allowed[:, :past] = True
    allowed[:past, past:] = False
    index = torch.arange(past, total, device=device)
    allowed[index, index] = True
    return allowed


class Forecaster(nn.Module):
    #: Arguments the task supplies; every other keyword argument is a ``model.*`` option (the schema derives from it).
    SUPPLIED = ("encoder", "lookback", "horizon")

    def __init__(
        self,
        encoder: PositionEncoder,
        *,
        layout: Literal["step", "patch", "query"],
        lookback: int,
        horizon: int,
        dim: Width,
        depth: Depth,
        num_heads: Heads,
        mlp_ratio: MlpRatio = 2.0,
        dropout: Dropout = 0.0,
        patch_len: Annotated[int, AT_LEAST_1] = 16,
        stride: Annotated[int, AT_LEAST_1] = 8,
        revin: bool = True,
        highway: bool | None = False,
    ) -> None:
        super().__init__()
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got '{layout}'")
        if highway is None:  # automatic: wherever the sizes are fixed
            highway = layout != "query"
        if layout != "step" and patch_len > lookback:
            raise ConfigError(
                f"model.patch_len ({patch_len}) must not exceed data.lookback ({lookback}): a patch is "
                f"patch_len past steps; lower model.patch_len or use model.layout=step"
            )
        if highway and layout == "query":
            raise PoslabError("model.highway needs a fixed lookback and horizon: use model.layout=step or patch")
        self.highway = nn.Linear(lookback, horizon, bias=False) if highway else None
        self.layout, self.lookback, self.horizon = layout, lookback, horizon
        self.patch_len, self.stride, self.revin = patch_len, stride, revin
        self.backbone = Transformer(
            encoder, dim=dim, depth=depth, num_heads=num_heads, mlp_ratio=mlp_ratio, dropout=dropout
        )
        self.dropout = nn.Dropout(dropout)
        if layout == "step":
            self.embed = nn.Linear(1, dim)
            self.head = nn.Linear(lookback * dim, horizon)
        else:
            self.embed = nn.Linear(patch_len, dim)
            if layout == "patch":
                self.head = nn.Linear(self.count_patches(lookback) * dim, horizon)
            else:
                self.query = nn.Parameter(torch.zeros(dim))
                nn.init.normal_(self.query, std=0.02)
                self.head = nn.Linear(dim, 1)

    @property
    def encoder(self) -> PositionEncoder:
        return self.backbone.encoder

    def count_patches(self, length: int) -> int:
        return (length - self.patch_len) // self.stride + 2  # one more for the end padding

    def forward(self, past: torch.Tensor, pos_past: Positions, pos_future: Positions) -> torch.Tensor:
        """``past [B, L, C]`` -> forecast ``[B, H, C]`` (H from ``pos_future``)."""
        batch, length, channels = past.shape
        horizon = pos_future.times.shape[-1] if pos_future.times is not None else pos_future.steps.shape[-1]
        x = past.permute(0, 2, 1).reshape(batch * channels, length)
        if self.revin:
            mean = x.mean(dim=1, keepdim=True).detach()
            std = (x.var(dim=1, keepdim=True, unbiased=False) + 1e-5).sqrt().detach()
            x = (x - mean) / std
        pos_past, pos_future = per_channel(pos_past, channels), per_channel(pos_future, channels)
        if self.layout == "patch":
            y = self._patches(x, pos_past)
        elif self.layout == "step":
            tokens = self.backbone(self.dropout(self.embed(x[..., None])), pos_past)
            y = self.head(tokens.flatten(1))
        else:
            y = self._queries(x, pos_past, pos_future, horizon)
        if self.highway is not None:
            y = y + self.highway(x)
        if self.revin:
            y = y * std + mean
        return y.reshape(batch, channels, horizon).permute(0, 2, 1).contiguous()

    def patchify(self, x: torch.Tensor, pos: Positions) -> tuple[torch.Tensor, Positions]:
        """Patch tokens ``[N, P, D]`` and their positions (each patch's first step)."""
        padded = torch.cat((x, x[:, -1:].expand(-1, self.stride)), dim=1)
        patches = padded.unfold(1, self.patch_len, self.stride)  # [N, P, patch_len]
        # the last patch may start in the end padding: it is a copy of the last step, so it takes that position
        starts = (torch.arange(patches.shape[1], device=x.device) * self.stride).clamp(max=x.shape[1] - 1)
        patch_pos = Positions(
            steps=pos.steps[..., starts] if pos.steps is not None else None,
            times=pos.times[..., starts] if pos.times is not None else None,
            steps_end=pos.steps_end,  # a subset of the steps: the same bound, no longer consecutive
        )
        return self.embed(patches), patch_pos

    def _patches(self, x: torch.Tensor, pos: Positions) -> torch.Tensor:
        tokens, patch_pos = self.patchify(x, pos)
        return self.head(self.backbone(self.dropout(tokens), patch_pos).flatten(1))

    def _queries(self, x: torch.Tensor, pos_past: Positions, pos_future: Positions, horizon: int) -> torch.Tensor:
        past_tokens, pos_past = self.patchify(x, pos_past)
        length = past_tokens.shape[1]
        queries = self.query.expand(x.shape[0], horizon, -1)
        tokens = self.dropout(torch.cat((past_tokens, queries), dim=1))

        def joined(a, b):
            if a is None or b is None:
                return None
            if a.dim() != b.dim():  # shared [L] steps with per-window [B, H] steps
                a, b = (t.expand(x.shape[0], -1) if t.dim() == 1 else t for t in (a, b))
            return torch.cat((a, b), dim=-1)

        ends = (pos_past.steps_end, pos_future.steps_end)
        pos = Positions(
            steps=joined(pos_past.steps, pos_future.steps),
            times=joined(pos_past.times, pos_future.times),
            steps_end=None if None in ends else max(ends),
        )
        out = self.backbone(tokens, pos, allowed=query_mask(length, horizon, x.device))
        return self.head(out[:, length:]).squeeze(-1)
