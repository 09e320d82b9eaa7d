"""Structured schemas of the resolved config: the keys and their types.

Defaults live in ``configs/*.yaml`` (one source of truth); these dataclasses
only say which keys exist and what type each has, so OmegaConf can reject an
unknown key or a wrong type with the key's full name. Encoder options are not
listed here: their schema is derived from the encoder's constructor
(:func:`encoder_schema`), so a new encoder needs no edit in this file.
"""

from __future__ import annotations

import inspect
import types
import typing
from dataclasses import dataclass, field, make_dataclass
from typing import Any, Literal, Optional, Union

from omegaconf import MISSING

from poslab.data.sequence_tasks import TASKS as SEQUENCE_TASKS
from poslab.data.text_sources import SOURCES as TEXT_SOURCES
from poslab.data.timeseries_sources import SOURCES as TIMESERIES_SOURCES
from poslab.data.vision_sources import SOURCES as VISION_SOURCES
from poslab.encoders.rope_scaling import SCALINGS

Number = Union[int, float]


@dataclass(frozen=True)
class Range:
    """The values a numeric key may take (``None``: unbounded on that side)."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def holds(self, value: float) -> bool:
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return False
        return self.high is None or not (value > self.high or (self.high_open and value == self.high))

    def describe(self) -> str:
        def show(x: float) -> str:
            return f"{int(x):,}" if float(x).is_integer() else f"{x:g}"

        if self.high is None:
            return f"{'>' if self.low_open else '>='} {show(self.low)}"
        if self.low is None:
            return f"{'<' if self.high_open else '<='} {show(self.high)}"
        return f"in {'(' if self.low_open else '['}{show(self.low)}, {show(self.high)}{')' if self.high_open else ']'}"


AT_LEAST_1, AT_LEAST_0, POSITIVE = Range(1), Range(0), Range(0, low_open=True)
FRACTION = Range(0, 1, high_open=True)  # [0, 1)

#: Value ranges by dotted key (a list is checked item by item; keys a modality lacks are skipped; null
#: passes where the type allows it). Checked before anything is written, as the types are.
RANGES: dict[str, Range] = {
    "seed": Range(0, 2**32 - 1),  # what NumPy's seeding accepts
    "run.checkpoint_every_n_steps": AT_LEAST_1,
    "model.dim": AT_LEAST_1,
    "model.depth": AT_LEAST_1,
    "model.num_heads": AT_LEAST_1,
    "model.mlp_ratio": POSITIVE,
    "model.dropout": FRACTION,
    "model.embed_std": POSITIVE,
    "model.patch_len": AT_LEAST_1,
    "model.stride": AT_LEAST_1,
    "task.label_smoothing": FRACTION,
    "optim.lr": POSITIVE,
    "optim.weight_decay": AT_LEAST_0,
    "optim.betas": FRACTION,
    "optim.warmup_fraction": FRACTION,
    "trainer.num_nodes": AT_LEAST_1,
    "trainer.max_epochs": Range(-1),  # -1: no limit
    "trainer.max_steps": Range(-1),
    "trainer.limit_train_batches": POSITIVE,
    "trainer.limit_val_batches": AT_LEAST_0,
    "trainer.limit_test_batches": POSITIVE,
    "trainer.check_val_every_n_epoch": AT_LEAST_1,
    "trainer.val_check_interval": POSITIVE,
    "trainer.log_every_n_steps": AT_LEAST_1,
    "trainer.gradient_clip_val": AT_LEAST_0,
    "trainer.num_sanity_val_steps": Range(-1),
    "data.batch_size": AT_LEAST_1,
    "data.eval_batch_size": AT_LEAST_1,
    "data.num_workers": AT_LEAST_0,
    "data.val_size": AT_LEAST_1,
    "data.test_size": AT_LEAST_1,
    "data.image_size": AT_LEAST_1,
    "data.patch_size": AT_LEAST_1,
    "data.augment.rotate": AT_LEAST_0,
    "data.augment.scale": FRACTION,
    "data.augment.translate": FRACTION,
    "data.context": Range(2),
    "data.eval_tokens": AT_LEAST_1,
    "data.random_positions": AT_LEAST_1,
    "data.symbols": AT_LEAST_1,
    "data.eval_sequences": AT_LEAST_1,
    "data.queries": AT_LEAST_1,
    "data.lookback": AT_LEAST_1,
    "data.horizon": AT_LEAST_1,
    "eval.multiples": AT_LEAST_1,
    "eval.image_sizes": AT_LEAST_1,
}
#: A run name is one path component of at most this many characters.
RUN_NAME_MAX = 120


@dataclass
class RunConfig:
    root: str = MISSING
    name: Optional[str] = MISSING
    checkpoint_every_n_steps: Optional[int] = None


@dataclass
class TrainerConfig:
    """Lightning ``Trainer`` arguments (``name`` is the preset)."""

    name: str = MISSING
    accelerator: str = MISSING
    devices: Any = MISSING
    num_nodes: int = MISSING
    strategy: str = MISSING
    precision: str = MISSING
    max_epochs: int = MISSING
    max_steps: int = MISSING
    limit_train_batches: Optional[Number] = MISSING  # null: all; int: batches; float: fraction
    limit_val_batches: Optional[Number] = MISSING
    limit_test_batches: Optional[Number] = MISSING
    check_val_every_n_epoch: Optional[int] = MISSING
    val_check_interval: Optional[Number] = MISSING  # null: once per epoch; int: every n training steps
    log_every_n_steps: int = MISSING
    gradient_clip_val: Optional[float] = MISSING
    num_sanity_val_steps: int = MISSING
    deterministic: bool = MISSING
    enable_progress_bar: bool = MISSING


@dataclass
class LoggerConfig:
    """``name`` picks the logger; the W&B keys are ignored by csv / tensorboard."""

    name: Literal["wandb", "csv", "tensorboard", "none"] = MISSING
    mode: Literal["auto", "online", "offline", "disabled"] = MISSING
    project: str = MISSING
    entity: Optional[str] = MISSING
    group: Optional[str] = MISSING
    tags: list[str] = MISSING
    notes: Optional[str] = MISSING
    log_model: bool = MISSING


@dataclass
class OptimConfig:
    """AdamW with a one-cycle (warmup + cosine) schedule stepped per batch."""

    lr: float = MISSING
    weight_decay: float = MISSING
    betas: tuple[float, float] = MISSING
    warmup_fraction: float = MISSING


@dataclass
class EvalConfig:
    """``poslab eval``: the checkpoint to re-evaluate."""

    ckpt: Optional[str] = MISSING


@dataclass
class VisionEvalConfig(EvalConfig):
    """End-of-run resolution probe: test accuracy at these image sizes, raw and rescaled coordinates."""

    image_sizes: list[int] = MISSING


Extension = Literal[tuple(k for k in SCALINGS if k != "none")]  # type: ignore[valid-type]


@dataclass
class TextEvalConfig(EvalConfig):
    """End-of-run length generalisation: multiples of the context, extensions tried."""

    multiples: list[int] = MISSING
    rope_scaling: list[Extension] = MISSING  # type: ignore[valid-type]


# -- vision -----------------------------------------------------------------
@dataclass
class AugmentConfig:
    """Random affine per image (train only): rotation °, scale ±, shift as image fraction."""

    enabled: bool = MISSING
    rotate: float = MISSING
    scale: float = MISSING
    translate: float = MISSING


@dataclass
class VisionDataConfig:
    name: Literal[tuple(VISION_SOURCES)] = MISSING  # type: ignore[valid-type]
    root: str = MISSING
    image_size: Optional[int] = MISSING
    patch_size: int = MISSING
    coords: Literal["raw", "rescaled"] = MISSING
    batch_size: int = MISSING
    eval_batch_size: int = MISSING
    num_workers: int = MISSING
    val_size: int = MISSING
    test_size: int = MISSING
    split_seed: int = MISSING
    download: bool = MISSING
    quadrant: bool = MISSING  # the quadrant task: digit in one quadrant of a 2x canvas, label = quadrant
    augment: AugmentConfig = field(default_factory=AugmentConfig)


@dataclass
class ViTConfig:
    compile: bool = MISSING  # torch.compile the backbone (train.yaml)
    dim: int = MISSING
    depth: int = MISSING
    num_heads: int = MISSING
    mlp_ratio: float = MISSING
    dropout: float = MISSING
    pool: Literal["cls", "mean"] = MISSING


@dataclass
class ClassificationTaskConfig:
    name: Literal["classification"] = MISSING
    label_smoothing: float = MISSING


# -- text ---------------------------------------------------------------------------
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


@dataclass
class TextModelConfig:
    compile: bool = MISSING  # torch.compile the backbone (train.yaml)
    dim: int = MISSING
    depth: int = MISSING
    num_heads: int = MISSING
    mlp_ratio: float = MISSING
    dropout: float = MISSING
    embed_std: float = MISSING


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


# -- time series ------------------------------------------------------------------
@dataclass
class TimeseriesDataConfig:
    name: Literal[tuple(TIMESERIES_SOURCES)] = MISSING  # type: ignore[valid-type]
    root: str = MISSING
    path: Optional[str] = MISSING
    lookback: int = MISSING
    horizon: int = MISSING
    features: Literal["multivariate", "univariate"] = MISSING
    batch_size: int = MISSING
    eval_batch_size: int = MISSING
    download: bool = MISSING


@dataclass
class ForecasterConfig:
    compile: bool = MISSING  # torch.compile the backbone (train.yaml)
    layout: Literal["step", "patch", "query"] = MISSING
    dim: int = MISSING
    depth: int = MISSING
    num_heads: int = MISSING
    mlp_ratio: float = MISSING
    dropout: float = MISSING
    patch_len: int = MISSING
    stride: int = MISSING
    revin: bool = MISSING
    highway: Optional[bool] = MISSING  # null: on for step / patch, off for query


@dataclass
class ForecastTaskConfig:
    name: Literal["forecast"] = MISSING


@dataclass
class TimeseriesEvalConfig(EvalConfig):
    """Baselines and probes at the end of a forecasting run."""

    ridge: float = MISSING  # the linear baseline's ridge penalty
    irregular_drop: float = MISSING  # fraction of past steps the irregular-sampling probe drops


@dataclass(frozen=True)
class ModalitySchema:
    """The modality-specific parts of the config."""

    task: type
    data: type
    model: type
    eval: type = EvalConfig
    check: Any = None  # cfg -> error message or None, for rules across keys


MODALITY_SCHEMAS: dict[str, ModalitySchema] = {
    "vision": ModalitySchema(
        task=ClassificationTaskConfig, data=VisionDataConfig, model=ViTConfig, eval=VisionEvalConfig
    ),
    "text": ModalitySchema(
        task=LMTaskConfig, data=TextDataConfig, model=TextModelConfig, eval=TextEvalConfig, check=check_text
    ),
    "timeseries": ModalitySchema(
        task=ForecastTaskConfig, data=TimeseriesDataConfig, model=ForecasterConfig, eval=TimeseriesEvalConfig
    ),
}


def encoder_schema(name: str) -> type:
    """A dataclass for ``encoder.*``: ``name`` plus the constructor's typed options.

    A composite (``rope+calendar``) gets one nested block per member.
    """
    from poslab.encoders.registry import SEPARATOR, members_of

    fields_: list = [("name", Literal[name], MISSING)]  # type: ignore[valid-type]
    if SEPARATOR in name:
        for member in members_of(name):
            block = _options_schema(member)
            fields_.append((member, block, field(default_factory=block)))
    else:
        fields_ += _option_fields(name)
    return make_dataclass(f"Encoder_{name.replace(SEPARATOR, '_')}", fields_)


def _options_schema(name: str) -> type:
    return make_dataclass(f"Options_{name}", _option_fields(name))


def _option_fields(name: str) -> list:
    """(key, type, default) of an encoder's options, string annotations evaluated."""
    from poslab.encoders import encoder_class, encoder_options

    hints = typing.get_type_hints(encoder_class(name).__init__)
    out = []
    for key, param in encoder_options(name).items():
        annotation = _normalise(hints.get(key, Any))
        default = MISSING if param.default is inspect.Parameter.empty else param.default
        out.append((key, annotation, field(default=default)))
    return out


def _normalise(annotation: Any) -> Any:
    """``X | None`` (types.UnionType) -> ``typing.Union`` that OmegaConf understands."""
    if isinstance(annotation, types.UnionType):
        return Union[tuple(_normalise(a) for a in annotation.__args__)]
    return annotation


def root_schema(modality: str, encoder: type) -> type:
    """The whole config's schema for one (modality, encoder) pair."""
    parts = MODALITY_SCHEMAS[modality]
    return make_dataclass(
        "Config",
        [
            ("modality", str, MISSING),
            ("positions", list[str], field(default_factory=list)),  # set by the modality's YAML
            ("experiment", Optional[str], MISSING),
            ("seed", int, MISSING),
            ("expect", list[str], field(default_factory=list)),
            ("compare_encoders", list[str], field(default_factory=list)),
            ("compare_experiment", Optional[str], None),
            ("compare_variants", dict[str, list[str]], field(default_factory=dict)),
            ("variant", Optional[str], None),
            ("resume", Optional[str], None),
            ("task", parts.task, field(default_factory=parts.task)),
            ("encoder", encoder, field(default_factory=encoder)),
            ("data", parts.data, field(default_factory=parts.data)),
            ("model", parts.model, field(default_factory=parts.model)),
            ("optim", OptimConfig, field(default_factory=OptimConfig)),
            ("trainer", TrainerConfig, field(default_factory=TrainerConfig)),
            ("logger", LoggerConfig, field(default_factory=LoggerConfig)),
            ("run", RunConfig, field(default_factory=RunConfig)),
            ("eval", parts.eval, field(default_factory=parts.eval)),
        ],
    )
