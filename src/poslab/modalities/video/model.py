"""A ViT over space-time patches (ViViT's uniform frame sampling / tubelet embedding, Arnab et al. 2021, §3.2).

A ``tubelet x p x p`` 3D convolution embeds each token; tokens are listed
frame-major, then row-major, the order the data module lists positions in.
Everything after the embedding is the vision ViT.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from poslab.encoders.base import PositionEncoder
from poslab.modalities.vision.model import ViT


class VideoViT(ViT):
    #: Arguments the task supplies; every other keyword argument is a ``model.*`` option (the schema derives from it).
    SUPPLIED = ("encoder", "in_chans", "num_classes", "patch_size", "tubelet")

    def __init__(
        self,
        encoder: PositionEncoder,
        *,
        in_chans: int,
        num_classes: int,
        patch_size: int,
        tubelet: int,
        dim: int,
        depth: int,
        num_heads: int,
        mlp_ratio: float = 4.0,
        dropout: float = 0.0,
        pool: Literal["cls", "mean"] = "cls",
    ) -> None:
        super().__init__(
            encoder,
            in_chans=in_chans,
            num_classes=num_classes,
            patch_size=patch_size,
            dim=dim,
            depth=depth,
            num_heads=num_heads,
            mlp_ratio=mlp_ratio,
            dropout=dropout,
            pool=pool,
        )
        size = (tubelet, patch_size, patch_size)
        self.patch_embed = nn.Conv3d(in_chans, dim, kernel_size=size, stride=size)

    def patch_tokens(self, clips: torch.Tensor) -> torch.Tensor:
        """``[B, T, C, H, W] -> [B, T' * gh * gw, D]``, frame-major then row-major."""
        return self.patch_embed(clips.transpose(1, 2)).flatten(2).transpose(1, 2)
