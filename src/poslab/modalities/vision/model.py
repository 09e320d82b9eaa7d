"""Vision Transformer classifier (Dosovitskiy et al. 2021) on the shared backbone.

Patches are embedded by a strided convolution and flattened row-major, the
order in which the data module lists patch coordinates. The class token (when
``pool="cls"``) is a prefix token: it carries no position.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from poslab.config.ranges import Depth, Dropout, Heads, MlpRatio, Width
from poslab.encoders.base import PositionEncoder
from poslab.nn.backbone import Transformer
from poslab.positions import Positions


class ViT(nn.Module):
    """``model.*`` options are this constructor's keyword arguments (the schema derives from it) except
    :data:`SUPPLIED`, which the task fills from the data."""

    #: Arguments the task supplies (the encoder, sizes from the data); every other one is a ``model.*`` option.
    SUPPLIED = ("encoder", "in_chans", "num_classes", "patch_size")

    def __init__(
        self,
        encoder: PositionEncoder,
        *,
        in_chans: int,
        num_classes: int,
        patch_size: int,
        dim: Width,
        depth: Depth,
        num_heads: Heads,
        mlp_ratio: MlpRatio = 4.0,
        dropout: Dropout = 0.0,
        pool: Literal["cls", "mean"] = "cls",
        drop_path: Dropout = 0.0,  # stochastic depth at the last block, 0 at the first (DeiT: 0.1)
    ) -> None:
        super().__init__()
        if pool not in ("cls", "mean"):
            raise ValueError(f"pool must be 'cls' or 'mean', got '{pool}'")
        self.pool = pool
        self.patch_embed = nn.Conv2d(in_chans, dim, kernel_size=patch_size, stride=patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim)) if pool == "cls" else None
        if self.cls_token is not None:
            nn.init.trunc_normal_(self.cls_token, std=0.02)
        self.backbone = Transformer(
            encoder, dim=dim, depth=depth, num_heads=num_heads, mlp_ratio=mlp_ratio, dropout=dropout,
            drop_path=drop_path,
        )  # fmt: skip
        self.head = nn.Linear(dim, num_classes)

    @property
    def encoder(self) -> PositionEncoder:
        return self.backbone.encoder

    def patch_tokens(self, images: torch.Tensor) -> torch.Tensor:
        """``[B, C, H, W] -> [B, gh * gw, D]``, row-major."""
        return self.patch_embed(images).flatten(2).transpose(1, 2)

    def forward(self, images: torch.Tensor, pos: Positions | torch.Tensor) -> torch.Tensor:
        x = self.patch_tokens(images)
        prefix = 0
        if self.cls_token is not None:
            x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1)
            prefix = 1
        x = self.backbone(x, pos, num_prefix_tokens=prefix)
        return self.head(x[:, 0] if prefix else x.mean(dim=1))
