"""Validation (and test) items held out of a training set by count, the same ones every run."""

from __future__ import annotations

from typing import TypeVar

import torch

from poslab.errors import ConfigError

Item = TypeVar("Item")


def held_out(count: int, val_size: int, test_size: int, seed: int) -> tuple[torch.Tensor, dict[str, slice]]:
    """The training items' order (shuffled with ``seed``, the config's ``data.split_seed``) and the slices of it
    each split takes: ``val_size`` for validation, ``test_size`` (0: the data has a test split) for the test,
    the rest for training. Too few items for them is one line."""
    order = torch.randperm(count, generator=torch.Generator().manual_seed(seed))
    if val_size + test_size >= count:
        raise ConfigError(f"data.val_size + data.test_size = {val_size + test_size} leaves no training items out of "
                          f"{count}")  # fmt: skip
    held = {"train": slice(test_size + val_size, None), "val": slice(test_size, test_size + val_size)}
    return order, held | ({"test": slice(0, test_size)} if test_size else {})


def split_items(
    train: list[Item], test: list[Item] | None, val_size: int, test_size: int, seed: int
) -> dict[str, list[Item]]:
    """``train``, ``val`` and ``test`` lists of a set read from files: validation held out of ``train`` by
    :func:`held_out`, and the test too when the set has none (``test`` None)."""
    order, held = held_out(len(train), val_size, test_size if test is None else 0, seed)
    shuffled = [train[i] for i in order.tolist()]
    return {k: shuffled[cut] for k, cut in held.items()} | ({"test": test} if test is not None else {})
