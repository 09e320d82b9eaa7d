"""The text config schema: every ``task`` / ``data`` / ``eval`` option with its type and default.

An option is declared once, here (``model.*``: in the causal LM's
constructor); ``configs/modality/text.yaml`` and experiments set other values,
and validation and ``poslab train --options`` derive from these declarations.
Each range is declared at its field (``Annotated[int, AT_LEAST_1]``, :mod:`poslab.config.ranges`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal, Optional

from poslab.config.options import options_schema
from poslab.config.ranges import AT_LEAST_1, Range
from poslab.config.schema import EvalConfig, ModelConfig
from poslab.encoders import available_encoders, encoder_class
from poslab.encoders.rope_scaling import SCALINGS
from poslab.modalities.text.model import CausalLM
from poslab.modalities.text.sequence_tasks import TASKS as SEQUENCE_TASKS
from poslab.modalities.text.sources import SOURCES as TEXT_SOURCES
from poslab.modalities.text.tokenizers import check_spec

#: What the length study may apply at evaluation: every RoPE scaling but none, and the extensions other
#: encoders declare (rnope's ``swan``).
Extension = Literal[  # type: ignore[valid-type]
    tuple(
        dict.fromkeys(
            [
                *(k for k in SCALINGS if k != "none"),
                *(e for name in available_encoders() for e in encoder_class(name).context_extensions),
            ]
        )
    )
]


@dataclass
class TextEvalConfig(EvalConfig):
    """End-of-run length generalisation: multiples of the context, extensions tried."""

    multiples: Annotated[list[int], AT_LEAST_1] = field(
        default_factory=lambda: [1, 2, 4, 8]
    )  # lengths evaluated, x data.context
    rope_scaling: list[Extension] = field(  # type: ignore[valid-type]  # tried at evaluation where they apply
        default_factory=lambda: ["linear", "ntk", "dynamic", "yarn"]
    )
    # Searched extensions (rope's longrope, longrope2): searched per length on about search_tokens validation tokens,
    # search_population candidates and search_generations rounds of half as many new ones.
    search_population: Annotated[int, Range(2)] = 16
    search_generations: Annotated[int, Range(0)] = 6
    search_tokens: Annotated[int, AT_LEAST_1] = 8192
    # What the searches are scored by: each its own (longrope: the loss of every token; longrope2: the loss of a
    # needle's tokens), or loss / needle for all (LongRoPE2's Table 6 compares the two).
    search_objective: Literal["own", "loss", "needle"] = "own"
    # data=flip_flop: writes this many times rarer than in training, at the training length (the sparse
    # test of Liu et al. 2023; 11 is their FFL(0.98)); logged as sparse/<metric>@<s>x.
    sparsity: Annotated[list[float], Range(1.0)] = field(default_factory=list)
    # Perplexity against length on long held-out text (the test split as one document; sliding windows as in
    # Press et al. 2022 and yarn's eval/perplexity.py: a window of L tokens scores those the one before did not,
    # after at least L - stride tokens of context); logged as longdoc/ppl@<L> and longdoc/loss@<L>.
    longdoc_lengths: Annotated[list[int], Range(2)] = field(default_factory=list)  # e.g. [256, 1024, 4096]
    longdoc_stride: Annotated[Optional[int], AT_LEAST_1] = None  # None: half the window
    longdoc_tokens: Annotated[int, Range(2)] = 65536  # test tokens scored, the same ones at every length
    # Passkey retrieval (yarn's eval/passkey.py prompt): a 5-digit key hidden at passkey_depths evenly spaced
    # depths of filler text of each length (tokens), passkey_trials keys per cell; right when greedy decoding
    # would write the whole key. Logged as passkey/acc@<length>, with a length x depth table and heatmap.
    passkey_lengths: Annotated[list[int], Range(16)] = field(default_factory=list)  # e.g. [256, 1024, 4096]
    passkey_depths: Annotated[int, AT_LEAST_1] = 5
    passkey_trials: Annotated[int, AT_LEAST_1] = 4


@dataclass
class TextDataConfig:
    """Corpora (shakespeare is embedded: no network) and synthetic sequence tasks (``task.name=sequence``)."""

    name: Literal[(*TEXT_SOURCES, *SEQUENCE_TASKS)] = "shakespeare"  # type: ignore[valid-type]
    root: str = "data"  # download cache; data.root=../shared/data finds a pre-filled one
    path: Optional[str] = None  # data=textfile: your UTF-8 file (90 / 5 / 5 %); jsonl, parquet, txtdir: yours
    field: str = "text"  # data=jsonl / parquet: the records' field that holds a document's text
    # Corpora: how text becomes tokens: char, bpe, tiktoken:<encoding> or hf:<folder or repo> (tokenizers.py)
    tokenizer: str = "char"
    vocab_size: Annotated[int, Range(256)] = 4096  # bpe: the vocabulary it is trained to (256 bytes + merges)
    # Train from token shards streamed from disk (litdata; `poslab prepare` writes them, or the first run does)
    stream: bool = False
    shards: Optional[str] = None  # the shards' folder or bucket URL; None: <root>/shards/<name>-<tokenizer digest>
    workers: Annotated[int, Range(0)] = 0  # processes that read the streamed shards (and prepare them: at least 1)
    context: Annotated[int, Range(2)] = 64  # training context length L
    batch_size: Annotated[int, AT_LEAST_1] = 32
    eval_batch_size: Annotated[int, AT_LEAST_1] = 64
    # Held-out tokens scored at each length (validation and length generalisation), cut down to a
    # multiple of context x lcm(eval.multiples) so every length scores the same ones.
    eval_tokens: Annotated[int, AT_LEAST_1] = 32768
    random_positions: Annotated[Optional[int], AT_LEAST_1] = (
        None  # N: train on sorted random positions from [0, N) (Ruoss et al. 2023)
    )
    # With random_positions: evaluate on them too (sampled, as the paper) or on 0..L-1 (arange).
    random_positions_eval: Literal["sampled", "arange"] = "sampled"
    download: bool = True
    symbols: Annotated[int, AT_LEAST_1] = 128  # sequence tasks: alphabet size (recall needs one key per pair at 8x)
    eval_sequences: Annotated[int, AT_LEAST_1] = 500  # sequence tasks: sequences per evaluation set and length
    queries: Annotated[int, AT_LEAST_1] = (
        1  # associative_recall: pairs asked per sequence (MQAR); flip_flop: reads per sequence
    )


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
    if cfg.data.name in SEQUENCE_TASKS and cfg.data.stream:
        return f"data={cfg.data.name} is generated; data.stream applies to corpora"
    if cfg.data.name in SEQUENCE_TASKS and cfg.data.tokenizer != "char":
        return (
            f"data={cfg.data.name} makes its own tokens; data.tokenizer applies to corpora (got {cfg.data.tokenizer})"
        )
    if cfg.data.name not in SEQUENCE_TASKS and (problem := check_spec(cfg.data.tokenizer)):
        return problem
    for key in ("longdoc_lengths", "passkey_lengths"):
        if cfg.eval[key] and cfg.data.name in SEQUENCE_TASKS:
            return f"eval.{key} applies to corpora (got data={cfg.data.name}); set eval.{key}=[]"
    if cfg.eval.sparsity and cfg.data.name != "flip_flop":
        return f"eval.sparsity applies to data=flip_flop only (got data={cfg.data.name}); set eval.sparsity=[]"
    return None
