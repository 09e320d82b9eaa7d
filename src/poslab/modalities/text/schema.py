"""The text config schema: the keys of ``task`` / ``data`` / ``model`` / ``eval`` and their types.

Values live in ``configs/modality/text.yaml``; value ranges by dotted key in :data:`RANGES`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

from omegaconf import MISSING

from poslab.encoders.rope_scaling import SCALINGS
from poslab.modalities.text.model import CausalLM
from poslab.modalities.text.sequence_tasks import TASKS as SEQUENCE_TASKS
from poslab.modalities.text.sources import SOURCES as TEXT_SOURCES
from poslab.options import options_schema
from poslab.schema import AT_LEAST_1, POSITIVE, EvalConfig, ModelConfig, Range

RANGES = {
    "model.embed_std": POSITIVE,
    "data.context": Range(2),
    "data.eval_tokens": AT_LEAST_1,
    "data.random_positions": AT_LEAST_1,
    "data.symbols": AT_LEAST_1,
    "data.eval_sequences": AT_LEAST_1,
    "data.queries": AT_LEAST_1,
    "eval.multiples": AT_LEAST_1,
}

Extension = Literal[tuple(k for k in SCALINGS if k != "none")]  # type: ignore[valid-type]


@dataclass
class TextEvalConfig(EvalConfig):
    """End-of-run length generalisation: multiples of the context, extensions tried."""

    multiples: list[int] = MISSING
    rope_scaling: list[Extension] = MISSING  # type: ignore[valid-type]


@dataclass
class TextDataConfig:
    name: Literal[(*TEXT_SOURCES, *SEQUENCE_TASKS)] = MISSING  # type: ignore[valid-type]
    root: str = MISSING
    path: Optional[str] = MISSING
    context: int = MISSING
    batch_size: int = MISSING
    eval_batch_size: int = MISSING
    eval_tokens: int = MISSING
    random_positions: Optional[int] = MISSING
    random_positions_eval: Literal["sampled", "arange"] = MISSING
    download: bool = MISSING
    symbols: int = MISSING  # sequence tasks: alphabet size
    eval_sequences: int = MISSING  # sequence tasks: sequences per evaluation set
    queries: int = MISSING  # associative_recall: pairs asked per training sequence (MQAR); evaluation asks one


#: ``model.*``: the causal LM's keyword options, typed and defaulted by its constructor.
TextModelConfig = options_schema("TextModelConfig", CausalLM, CausalLM.SUPPLIED, bases=(ModelConfig,))


@dataclass
class LMTaskConfig:
    """``lm`` for corpora, ``sequence`` for the synthetic tasks (copy, reverse, associative_recall)."""

    name: Literal["lm", "sequence"] = MISSING


def check_text(cfg) -> str | None:
    """The task must match the data: corpora are language modelling, synthetic data sequence tasks."""
    wanted = "sequence" if cfg.data.name in SEQUENCE_TASKS else "lm"
    if cfg.task.name != wanted:
        return f"data={cfg.data.name} needs task.name={wanted} (got task.name={cfg.task.name})"
    return None
