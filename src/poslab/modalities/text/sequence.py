"""Data module for the synthetic sequence tasks (``data=copy|reverse|associative_recall|flip_flop``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset

from poslab.data.resumable import ResumableLoader
from poslab.errors import ConfigError
from poslab.modalities.text.data import TextDataModule
from poslab.modalities.text.sequence_tasks import IGNORE, MULTI_ANSWER, generate, task_size, vocab_size

#: Depth buckets of the recall curve: 5, so that the needle experiment's 1x evaluation (5 pairs) fills each.
DEPTH_BUCKETS = 5


class TaskStream(IterableDataset):
    """Endless training batches, each at one random size in ``[1, max_size]``."""

    def __init__(self, task: str, max_size: int, batch: int, symbols: int, seed: int, queries: int = 1) -> None:
        self.task, self.max_size, self.batch, self.symbols, self.seed = task, max_size, batch, symbols, seed
        self.queries = queries

    def __iter__(self) -> Iterator[dict]:
        generator = torch.Generator().manual_seed(self.seed)
        while True:
            size = int(torch.randint(1, self.max_size + 1, (1,), generator=generator))
            yield generate(self.task, size, self.batch, self.symbols, generator, queries=self.queries)


class SequenceDataModule(TextDataModule):
    """Same interface as the text data module; batches score only the answer tokens."""

    def prepare_data(self) -> None:
        pass  # generated on the fly

    @property
    def queries(self) -> int:
        """Answers per recall or flip-flop sequence (``data.queries``), in training and evaluation alike."""
        return self.cfg.queries if self.cfg.name in MULTI_ANSWER else 1

    def setup(self, stage: str | None = None) -> None:
        self.size = task_size(self.cfg.name, self.context, self.queries)
        longest = task_size(self.cfg.name, self.context * 8, self.queries)
        if self.cfg.name == "associative_recall" and self.cfg.symbols < longest:
            raise ConfigError(f"data.symbols={self.cfg.symbols} is too small for {longest} distinct keys at 8x")

    @property
    def vocab_size(self) -> int:
        return vocab_size(self.cfg.symbols)

    def model_facts(self) -> dict[str, Any]:
        return {"vocab_size": self.vocab_size}

    @staticmethod
    def bucket_depths(count: int, pairs: int) -> torch.Tensor:
        """``count`` depths that place the first query at every pair of each depth bucket in turn: sequence i
        asks from bucket i mod B, cycling through that bucket's pairs (index / pairs in [b/B, (b+1)/B))."""
        i = torch.arange(count)
        bucket = i % DEPTH_BUCKETS
        first = torch.ceil(bucket * pairs / DEPTH_BUCKETS)
        width = (torch.ceil((bucket + 1) * pairs / DEPTH_BUCKETS) - first).clamp(min=1)
        index = (first + (i // DEPTH_BUCKETS) % width).clamp(max=pairs - 1)
        return (index + 0.5) / pairs  # generate() takes floor(depth * pairs): this index

    def fixed_set(self, size: int, split_seed: int, sparsity: float = 1.0, count: int | None = None) -> list[dict]:
        """``count`` (default ``data.eval_sequences``) seeded evaluation sequences at one size, in batches; the
        first recall query's depth spread evenly over the buckets; flip-flop's writes ``sparsity`` times rarer."""
        generator = torch.Generator().manual_seed(split_seed)
        count, batch = count or self.cfg.eval_sequences, self.cfg.eval_batch_size
        depth = self.bucket_depths(count, size)
        return [
            generate(
                self.cfg.name,
                size,
                min(batch, count - i),
                self.cfg.symbols,
                generator,
                depth[i : i + batch],
                self.queries,
                sparsity,
            )  # fmt: skip
            for i in range(0, count, batch)
        ]

    def train_dataloader(self) -> DataLoader:
        stream = TaskStream(
            self.cfg.name, self.size, self.cfg.batch_size, self.cfg.symbols, self.stream_seed(), self.queries
        )
        return self.resumable(ResumableLoader(stream, batch_size=None))

    def val_dataloader(self) -> DataLoader:
        return self.eval_loader(self.fixed_set(self.size, 1), None)

    def test_dataloader(self) -> DataLoader:
        return self.eval_loader(self.fixed_set(self.size, 2), None)

    def lengen_loader(self, multiple: int) -> DataLoader:
        """``multiple`` × the training size, drawn as in training (flip-flop: writes as frequent)."""
        size = task_size(self.cfg.name, self.context * multiple, self.queries)
        return self.eval_loader(self.fixed_set(size, 3), None)

    def long_windows(self, multiple: int, rows: int, step: int):
        raise ConfigError(f"data={self.cfg.name} generates sequences of the training length: it has no rows "
                          f"{multiple}x the context to train on (a corpus has)")  # fmt: skip

    def search_loader(self, multiple: int, tokens: int) -> DataLoader:
        """Sequences of ``multiple`` × the training size, about ``tokens`` tokens, from a seed of their own:
        what a searched extension is fitted on, apart from the sequences that score it."""
        length = self.context * multiple
        size = task_size(self.cfg.name, length, self.queries)  # the task's own size (pairs, symbols), not tokens
        return self.eval_loader(self.fixed_set(size, 5, count=max(1, tokens // length)), None)

    def sparse_loader(self, sparsity: float) -> DataLoader:
        """Flip-flop at the training size with writes ``sparsity`` times rarer: Liu et al.'s sparse test,
        which moves the last write further back without a length the model has not seen."""
        return self.eval_loader(self.fixed_set(self.size, 4, sparsity=sparsity), None)

    def as_batch(self, item: dict, training: bool = False) -> dict[str, Any]:
        windows = item["windows"]
        inputs, targets = windows[:, :-1], windows[:, 1:].masked_fill(~item["answer_mask"], IGNORE)
        batch = {"tokens": inputs, "targets": targets, "pos": self.positions(inputs.shape, inputs.device, training)}
        if "depth" in item:
            batch["depth"] = item["depth"]
        return batch

    def similarity_positions(self):
        pos, _, grid = super().similarity_positions()
        return pos, self.context, grid
