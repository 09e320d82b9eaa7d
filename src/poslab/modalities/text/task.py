"""Causal language modelling: loss in nats per token, bits per character (``bpc``; bits per token, ``bpt``, with a
tokenizer other than ``char``), perplexity."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torchmetrics import MeanMetric

from poslab.config.options import pick_options
from poslab.encoders.longrope_search import SearchBudget
from poslab.errors import ConfigError, DataError
from poslab.modalities.text.generation import sample
from poslab.modalities.text.lengen import as_generated, searched_extension
from poslab.modalities.text.model import CausalLM
from poslab.modalities.text.tokenizers import CharTokenizer, Tokenizer
from poslab.tasks.base import PositionTask


def perplexity(loss: torch.Tensor) -> torch.Tensor:
    """exp(loss) in float64 (float32 overflows past a loss of 88.7), held at float64's largest value past a
    loss of 709.8, so a diverged run's summary stays a number (JSON has no infinity)."""
    return torch.exp(loss.double()).clamp(max=torch.finfo(torch.float64).max)


class LanguageModel(PositionTask):
    """``cfg`` is the resolved config as plain containers; ``vocab`` the characters (if any)."""

    def __init__(self, cfg: dict[str, Any], vocab_size: int, context: dict[str, Any], vocab: str | None = None) -> None:
        super().__init__(cfg)
        self.save_hyperparameters()
        encoder = self.build_encoder(context, causal=CausalLM.causal)
        options = pick_options(CausalLM, cfg["model"], CausalLM.SUPPLIED)
        self.model = CausalLM(encoder, vocab_size=vocab_size, **options)
        # Token-weighted mean loss per stage; bits per token and perplexity derive from it.
        self.bits_key = "bpc" if cfg["data"].get("tokenizer", "char") == "char" else "bpt"
        self.val_loss = MeanMetric()
        self.test_loss = MeanMetric()

    def forward(self, tokens, pos):
        return self.model(tokens, pos)

    def loss(self, batch) -> torch.Tensor:
        logits = self(batch["tokens"], batch["pos"])
        return F.cross_entropy(logits.flatten(0, 1), batch["targets"].flatten())

    longer_rows = True

    def on_fit_start(self) -> None:
        """An encoder that trains on longer rows: the data must draw them (a corpus held in memory); fails here,
        before training, where it cannot."""
        super().on_fit_start()
        datamodule = self.trainer.datamodule
        for multiple in self.encoder.training_multiples():
            if multiple > 1 and not hasattr(datamodule, "long_windows"):
                raise ConfigError(f"encoder '{self.encoder.name}' trains on rows {multiple}x the context, which "
                                  f"data={self.cfg['data']['name']} does not draw (a corpus does)")  # fmt: skip
            if multiple > 1:
                datamodule.long_windows(multiple, 1, 0)

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        """Before the step, the search the encoder asks for (LongRoPE2's, as its extension starts), run as the
        length study runs it: on ``eval.search_tokens`` validation tokens, ``eval.search_*``'s budget."""
        super().on_train_batch_start(batch, batch_idx)
        request = self.encoder.search_in_training()
        if request is None:
            return
        kind, factor = request
        evaluation = self.cfg["eval"]
        budget = SearchBudget(int(evaluation["search_population"]), int(evaluation["search_generations"]),
                              int(self.trainer.datamodule.seed))  # fmt: skip
        tokens = int(evaluation["search_tokens"])
        objective = str(evaluation["search_objective"])
        _, result = searched_extension(self.trainer, self, kind, factor, round(factor), budget, tokens, objective)
        self.encoder.take_search(result)
        self.log_dict(
            {"search/fitness": result.fitness, "search/evaluated": float(result.evaluated)}, rank_zero_only=True
        )

    def training_step(self, batch, batch_idx):
        multiple = self.encoder.training_multiple(self.global_step)
        if multiple > 1:  # rows `multiple` times longer, as many tokens (LongRoPE2's long windows)
            datamodule = self.trainer.datamodule
            rows = max(1, batch["tokens"].shape[0] // multiple)
            batch = datamodule.as_batch(datamodule.long_windows(multiple, rows, self.global_step).to(self.device), True)
        loss = self.loss(batch)
        self.log("train/loss", loss, on_step=True, on_epoch=False, batch_size=batch["tokens"].shape[0])
        return loss

    def _eval_step(self, batch, stage: str, metric: MeanMetric) -> None:
        metric.update(self.loss(batch), weight=batch["targets"].numel())
        self.log(f"{stage}/loss", metric, on_step=False, on_epoch=True, prog_bar=True)

    def validation_step(self, batch, batch_idx):
        self._eval_step(batch, "val", self.val_loss)

    def test_step(self, batch, batch_idx):
        self._eval_step(batch, "test", self.test_loss)

    def on_validation_epoch_end(self) -> None:
        self._derived("val")

    def on_test_epoch_end(self) -> None:
        self._derived("test")

    def _derived(self, stage: str) -> None:
        loss = self.trainer.callback_metrics.get(f"{stage}/loss")
        if loss is not None:
            self.log(f"{stage}/{self.bits_key}", loss / math.log(2))
            self.log(f"{stage}/ppl", perplexity(loss))

    def lengen_logits(self, batch, generated: bool, context: int) -> torch.Tensor:
        """Logits of a length-study batch; ``generated``: as generation computes them, prefixes growing
        from the training ``context`` (see :func:`poslab.modalities.text.lengen.as_generated`)."""
        if not generated:
            return self(batch["tokens"], batch["pos"])

        return as_generated(self, batch["tokens"], batch["pos"], context)

    def lengen_measure(self, batch, generated: bool, context: int) -> dict[str, torch.Tensor]:
        """A length-study probe's measure: the loss of every predicted character (their mean: nats/char)."""
        logits = self.lengen_logits(batch, generated, context)
        return {"loss": F.cross_entropy(logits.flatten(0, 1).float(), batch["targets"].flatten(), reduction="none")}

    def longdoc_measure(self, batch) -> dict[str, torch.Tensor]:
        """A long-document window's measure: the loss of each token it scores (from ``scored_from`` on)."""
        logits = self(batch["tokens"], batch["pos"])
        losses = F.cross_entropy(logits.transpose(1, 2).float(), batch["targets"], reduction="none")
        scored = torch.arange(losses.shape[1], device=losses.device)[None] >= batch["scored_from"][:, None]
        return {"loss": losses[scored]}

    def passkey_retrieved(self, batch) -> torch.Tensor:
        """1 where greedy decoding would write a prompt's whole key (every key token the most likely), else 0."""
        logits = self(batch["tokens"], batch["pos"])
        right = logits.argmax(-1) == batch["targets"]
        key = torch.arange(right.shape[1], device=right.device)[None] >= right.shape[1] - batch["answer"][:, None]
        return (right | ~key).all(dim=1).float()

    def tokenizer(self, datamodule) -> Tokenizer:
        """The run's tokenizer: a character vocabulary is saved with the checkpoint; any other is made again
        from the data's config (a trained BPE read back from the data cache)."""
        vocab = self.hparams.get("vocab")
        tokenizer = CharTokenizer(vocab) if vocab else datamodule.tokenizer()
        if len(tokenizer) != self.hparams["vocab_size"]:
            raise DataError(f"the data's tokenizer ({tokenizer.spec}) has {len(tokenizer)} tokens, the checkpoint's "
                            f"model {self.hparams['vocab_size']}: it was trained on other data")  # fmt: skip
        return tokenizer

    def generate(self, prompt: str, datamodule, *, samples: int = 1, generator=None, **sampling) -> list[str]:
        """``samples`` continuations of ``prompt`` (:func:`poslab.modalities.text.generation.sample`'s options)."""
        tokenizer = self.tokenizer(datamodule)
        ids = tokenizer.encode(prompt).to(self.device)
        if not len(ids):
            raise ConfigError("prompt= is empty: give the text to continue, e.g. prompt='ROMEO:'")
        out = sample(self.model.eval(), ids.expand(samples, -1), generator=generator, **sampling)
        return [tokenizer.decode(row[len(ids) :]) for row in out]

    def evaluations(self, cfg) -> list:
        from poslab.modalities.text import callbacks  # deferred: Lightning and matplotlib, ~7 s

        found = [callbacks.LengthGeneralization(cfg.eval)]
        found += [callbacks.LongDocumentPerplexity(cfg.eval)] if cfg.eval.get("longdoc_lengths") else []
        return found + ([callbacks.PasskeyRetrieval(cfg.eval)] if cfg.eval.get("passkey_lengths") else [])
