"""Incremental decoding: each layer's keys and values kept, so a generated token costs one row of attention.

Positions are data, so a cached step is only the new tokens' positions after the cached ones. Three rules
make a cached step compute what a full forward pass over the same tokens computes, for every encoder:

* keys are kept *before* the encoder's rotation and rotated with the whole sequence's positions at every
  step (O(T·d), the order of the step's own attention), so no encoder has to promise that a key's
  rotation reads its own position only;
* a new query is transformed in its place within the whole sequence (a query row's transform may read its
  row index: SSMax's key count);
* an encoder that computes on written-out logits (``content_bias``, ``input_bias``, ``attention_logits``,
  ``attention_weights``) decodes with the logits of the whole prefix and keeps the new rows: every such
  hook computes a row from its own query and all keys, and these encoders hold the ``T × T`` logits in
  training as well. Their layers keep their normed inputs too (FoX's gates and PaTH's transforms read them).

An encoder whose transform of every position changes with the sequence's length (dynamic NTK) changes the
hidden states of every earlier token as the sequence grows, in every layer: no cached row stays valid, so
its decoder computes the whole prefix again at every step from the embedded tokens the cache keeps, as
decoding without a cache does and as the length study scores it (``as_generated``). Hugging Face keeps
each key as it was cached instead, so its cached and uncached generations differ (transformers#25104).
"""

from __future__ import annotations

import torch

from poslab.positions import Positions


def joined(before: Positions | None, after: Positions) -> Positions:
    """The positions of the cached tokens followed by ``after``'s (1D steps), keeping the facts that stay true."""
    if before is None:
        return after
    if before.steps is None or after.steps is None:
        raise ValueError("incremental decoding reads step positions (Positions.steps)")
    steps = torch.cat((before.steps, after.steps.to(before.steps.device)), dim=-1)
    consecutive = before.steps_start is not None and after.steps_start == before.steps_end
    ends = (before.steps_end, after.steps_end)
    return Positions(
        steps=steps,
        steps_start=before.steps_start if consecutive else None,
        steps_end=None if None in ends else max(ends),
    )


class LayerCache:
    """One layer's keys and values (``[B, H, T, Dh]``, before rotation) and, where its encoder reads them,
    its normed inputs (``[B, T, D]``)."""

    def __init__(self, owner: DecodingCache) -> None:
        self.owner = owner
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None
        self.inputs: torch.Tensor | None = None

    @property
    def positions(self) -> Positions:
        """Every cached token's positions, this step's included."""
        return self.owner.positions

    def append(self, keys: torch.Tensor, values: torch.Tensor, inputs: torch.Tensor | None):
        """Add this step's rows; returns all of them (inputs: None unless given)."""
        self.keys = keys if self.keys is None else torch.cat((self.keys, keys), dim=-2)
        self.values = values if self.values is None else torch.cat((self.values, values), dim=-2)
        if inputs is not None:
            self.inputs = inputs if self.inputs is None else torch.cat((self.inputs, inputs), dim=1)
        return self.keys, self.values, self.inputs


class DecodingCache:
    """A decoder's cache for one batch of sequences: one :class:`LayerCache` per layer and the positions so
    far. Hand the same cache to every step of one generation (``CausalLM.forward(..., cache=)``)."""

    def __init__(self, depth: int) -> None:
        self.layers = [LayerCache(self) for _ in range(depth)]
        self.positions: Positions | None = None
        #: the embedded tokens so far, kept for a model that computes its whole prefix at every step
        self.embedded: torch.Tensor | None = None

    def clear(self) -> None:
        """Forget every cached token."""
        self.__init__(len(self.layers))

    def __len__(self) -> int:
        """Tokens cached (this step's included, once it has begun)."""
        return 0 if self.positions is None else self.positions.steps.shape[-1]

    def advance(self, positions: Positions) -> Positions:
        """Begin a step over tokens at ``positions``; returns every token's positions."""
        self.positions = joined(self.positions, positions)
        return self.positions
