"""The text config schema: every ``task`` / ``data`` / ``eval`` option with its type and default.

An option is declared once, here (``model.*``: in the causal LM's
constructor); ``configs/modality/text.yaml`` and experiments set other values,
and validation and ``poslab train --options`` derive from these declarations.
Value ranges by dotted key in :data:`RANGES`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional

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

    multiples: list[int] = field(default_factory=lambda: [1, 2, 4, 8])  # lengths evaluated, x data.context
    rope_scaling: list[Extension] = field(  # type: ignore[valid-type]  # tried at evaluation where they apply
        default_factory=lambda: ["linear", "ntk", "dynamic", "yarn"]
    )


@dataclass
class TextDataConfig:
    """Corpora (shakespeare is embedded: no network) and synthetic sequence tasks (``task.name=sequence``)."""

    name: Literal[(*TEXT_SOURCES, *SEQUENCE_TASKS)] = "shakespeare"  # type: ignore[valid-type]
    root: str = "data"  # download cache; data.root=../shared/data finds a pre-filled one
    path: Optional[str] = None  # data=textfile: your UTF-8 file (90 / 5 / 5 % split)
    context: int = 64  # training context length L
    batch_size: int = 32
    eval_batch_size: int = 64
    # Held-out characters scored at each length (validation and length generalisation), cut down to a
    # multiple of context x lcm(eval.multiples) so every length scores the same ones.
    eval_tokens: int = 32768
    random_positions: Optional[int] = None  # N: train on sorted random positions from [0, N) (Ruoss et al. 2023)
    # With random_positions: evaluate on them too (sampled, as the paper) or on 0..L-1 (arange).
    random_positions_eval: Literal["sampled", "arange"] = "sampled"
    download: bool = True
    symbols: int = 128  # sequence tasks: alphabet size (recall needs one key per pair at 8x)
    eval_sequences: int = 500  # sequence tasks: sequences per evaluation set and length
    queries: int = 1  # associative_recall: pairs asked per sequence (MQAR); flip_flop: reads per sequence


#: ``model.*``: the causal LM's keyword options, typed and defaulted by its constructor.
TextModelConfig = options_schema("TextModelConfig", CausalLM, CausalLM.SUPPLIED, bases=(ModelConfig,))


@dataclass
class LMTaskConfig:
    """``lm`` for corpora, ``sequence`` for the synthetic tasks (copy, reverse, associative_recall, flip_flop)."""

    name: Literal["lm", "sequence"] = "lm"


def check_text(cfg) -> str | None:
    """The task must match the data: corpora are language modelling, synthetic data sequence tasks."""
    wanted = "sequence" if cfg.data.name in SEQUENCE_TASKS else "lm"
    if cfg.task.name != wanted:
        return f"data={cfg.data.name} needs task.name={wanted} (got task.name={cfg.task.name})"
    return None
