"""Decoder-only language model on the shared backbone (causal attention)."""

from __future__ import annotations

import math
from typing import Annotated

import torch
from torch import nn

from poslab.config.ranges import POSITIVE, Depth, Dropout, Heads, MlpRatio, Width
from poslab.encoders.base import PositionEncoder
from poslab.nn.backbone import Transformer
from poslab.nn.decoding import DecodingCache
from poslab.positions import Positions


class CausalLM(nn.Module):
    """Token embedding -> causal pre-norm transformer -> logits over the vocabulary.

    Initialisation: every linear layer of the blocks and the output head has
    normal weights of std 0.02 and zero biases — GPT-2's base init, *without*
    its (and nanoGPT's) 1/√(2·depth) scaling of the residual output projections
    — LayerNorms keep PyTorch's (weight 1, bias 0), the encoder its own. The
    token embedding's std is ``embed_std``: next to a fixed sinusoidal table
    (values in ±1) a token embedding of std 0.02 is drowned out, which is why
    Vaswani et al. scale theirs by √d. Position enters only through the
    encoder's hooks.
    """

    causal = True  # the encoder is built knowing it (a relative bias takes its causal form)
    #: Arguments the task supplies; every other keyword argument is a ``model.*`` option (the schema derives from it).
    SUPPLIED = ("encoder", "vocab_size")

    def __init__(
        self,
        encoder: PositionEncoder,
        *,
        vocab_size: int,
        dim: Width,
        depth: Depth,
        num_heads: Heads,
        mlp_ratio: MlpRatio = 4.0,
        dropout: Dropout = 0.0,
        embed_std: Annotated[float, POSITIVE] = 0.02,
        tie_embeddings: bool = False,
        residual_scaling: bool = False,
    ) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim)
        self.dropout = nn.Dropout(dropout)
        self.backbone = Transformer(
            encoder, dim=dim, depth=depth, num_heads=num_heads, mlp_ratio=mlp_ratio, dropout=dropout, causal=self.causal
        )
        self.head = nn.Linear(dim, vocab_size, bias=False)
        for module in (self.head, *self.backbone.blocks.modules()):  # the encoder keeps its own init
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=0.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        if residual_scaling:
            for block in self.backbone.blocks:
                for projection in block.residual_outputs():
                    nn.init.normal_(projection.weight, std=0.02 / math.sqrt(2 * depth))
        nn.init.normal_(self.embed.weight, std=embed_std)
        if tie_embeddings:
            self.head.weight = self.embed.weight

    def forward(
        self, tokens: torch.Tensor, pos: Positions | torch.Tensor, cache: DecodingCache | None = None
    ) -> torch.Tensor:
        """Logits ``[B, L, V]``; with a ``cache`` (:meth:`new_cache`), of the tokens after the cached ones."""
        return self.head(self.backbone(self.dropout(self.embed(tokens)), pos, cache=cache))

    def new_cache(self) -> DecodingCache:
        """An empty cache for decoding one batch incrementally."""
        return DecodingCache(len(self.backbone.blocks))
