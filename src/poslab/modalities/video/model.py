"""A ViT over space-time patches (ViViT's uniform frame sampling / tubelet embedding, Arnab et al. 2021, §3.2).

A ``tubelet x p x p`` 3D convolution embeds each token; tokens are listed
frame-major, then row-major, the order the data module lists positions in.
Everything after the embedding is the vision ViT.
"""

from __future__ import annotations

import torch
from torch import nn

from poslab.encoders.base import PositionEncoder
from poslab.modalities.vision.model import ViT


class VideoViT(ViT):
    """``model.*`` options are the ViT's (:class:`~poslab.modalities.vision.model.ViT`); ``tubelet`` is the
    data's, supplied by the task."""

    def __init__(self, encoder: PositionEncoder, *, in_chans: int, patch_size: int, tubelet: int, **options) -> None:
        super().__init__(encoder, in_chans=in_chans, patch_size=patch_size, **options)
        size = (tubelet, patch_size, patch_size)
        self.patch_embed = nn.Conv3d(in_chans, options["dim"], kernel_size=size, stride=size)

    def patch_tokens(self, clips: torch.Tensor) -> torch.Tensor:
        """``[B, T, C, H, W] -> [B, T' * gh * gw, D]``, frame-major then row-major."""
        return self.patch_embed(clips.transpose(1, 2)).flatten(2).transpose(1, 2)
