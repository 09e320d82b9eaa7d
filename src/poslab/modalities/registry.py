"""The modality registry: the :class:`Modality` record each plugin registers, and the lookups.

Modalities are plugins: one package per modality under ``poslab/modalities/``, discovered like the
encoders; ``poslab/modalities/<name>/__init__.py`` registers a :class:`Modality` that tells the generic
parts (train, eval, compare, report, show, the config validation) everything they need about it: its
config schema, its data module(s), its task(s), the metrics its reports lead with, its report pieces and
the positions ``poslab show`` draws. Those parts never name a modality.

This module is a leaf of the house (it imports the errors and the shared schema parts only), so the
generic floors below the plugins ask it, not the plugin folder above them.

Heavy pieces (anything importing Lightning or matplotlib) are given as
``"module:attribute"`` strings and imported on use, so listing modalities and
validating a config stay fast. A modality defined outside the package (a test,
a fork's plugin) may pass the objects themselves and call
:func:`register_modality`; its YAML goes in ``configs/modality/<name>.yaml``.
"""

from __future__ import annotations

import importlib
import pkgutil
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from poslab import entry_points
from poslab.config.schema import EvalConfig
from poslab.errors import ConfigError, did_you_mean

if TYPE_CHECKING:  # a Canvas holds Positions (torch): the registry itself loads no torch
    from poslab.positions import Positions

#: The package whose sub-packages are the built-in modalities (each registers itself on import).
PACKAGE = "poslab.modalities"
#: "module:attribute", or the object itself.
Ref = Any


def resolve(ref: Ref) -> Any:
    """The object a :data:`Ref` names (imported on first use)."""
    if not isinstance(ref, str):
        return ref
    module, _, attribute = ref.partition(":")
    return getattr(importlib.import_module(module), attribute)


@dataclass(frozen=True)
class Modality:
    """What one modality contributes. Only ``name``, the schema parts, ``tasks`` and ``datamodule`` are required.

    Schema parts are dataclasses saying which keys exist under ``task.*``,
    ``data.*``, ``model.*`` and ``eval.*`` and their types (values live in the
    modality's YAML); a field declares its range in its annotation
    (``Annotated[int, AT_LEAST_1]``, :mod:`poslab.config.ranges`). ``check(cfg)``
    returns a message for a rule across keys, or None.

    Report pieces, each a function of the report's groups of runs (see
    :mod:`poslab.study.report`): ``report_tables`` -> Markdown lines, ``report_data`` -> ``{key: (columns,
    rows)}`` tables the W&B comparison run logs,
    ``report_figures`` -> ``(file stem, caption, draw)`` triples where ``draw()``
    returns a figure or None, ``overlays`` -> ``{chart key: (title, x name,
    {label: {x: y}})}`` for the W&B comparison run.

    ``show(length)`` -> :class:`Canvas`: the canonical positions
    ``poslab show`` draws for this modality's encoders.
    """

    name: str
    task: type
    data: type
    model: type
    tasks: Mapping[str, Ref]  # task.name -> LightningModule class
    datamodule: Ref  # the data module of every data.name not in ``datamodules``
    datamodules: Mapping[str, Ref] = field(default_factory=dict)  # data.name -> a data module of its own
    eval: type = EvalConfig  # the eval.* keys every run has; a modality's probes extend it
    ranges: Mapping[str, Any] = field(default_factory=dict)  # deprecated: ranges by dotted key, still checked
    check: Callable[[Any], str | None] | None = None
    headline: tuple[str, ...] = ()  # metrics a report's table leads with, in order
    extra_prefixes: tuple[str, ...] = ()  # metric families the table also shows when runs report them
    report_tables: Ref = None
    report_data: Ref = None
    report_figures: Ref = None
    overlays: Ref = None
    show: Ref = None
    #: ``training_step(encoder, *, dim, depth, num_heads, length, batch, vocab_size, device, compile, bf16)``: one
    #: training step of the modality's model on random data, with ``.model`` (``make bench``, ``make gpu-check``).
    training_step: Ref = None

    #: The position fields this modality is the canonical picture of: ``poslab show`` draws an encoder that
    #: reads one of them here unless told otherwise (so a new modality providing them changes no picture).
    shows: tuple[str, ...] = ()
    #: Overrides that shrink a run to a few CPU seconds on data it makes itself: the registry-wide tests run a
    #: plugin's modality through them (the built-in ones have test fixtures with generated data).
    tiny: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.ranges:
            warnings.warn(
                f"modality {self.name!r}: Modality(ranges=...) is deprecated; declare each range at its field, "
                "e.g. `patch_size: Annotated[int, AT_LEAST_1] = 7` (poslab.config.ranges)",
                DeprecationWarning,
                stacklevel=3,
            )

    def task_class(self, task_name: str) -> type:
        if task_name not in self.tasks:
            raise ConfigError(f"modality '{self.name}' has no task '{task_name}'; valid: {', '.join(self.tasks)}")
        return resolve(self.tasks[task_name])

    def datamodule_class(self, data_name: str) -> type:
        return resolve(self.datamodules.get(data_name, self.datamodule))

    def datamodule_for(self, cfg: Any, train_cfg: Any = None) -> Any:
        """The data module serving ``cfg.data.name``; ``train_cfg``: the config a checkpoint was trained with,
        when it is evaluated on other data (the data module decides what it needs from it)."""
        return self.datamodule_class(cfg.data.name).from_config(cfg, train_cfg)

    def task_for(self, plain_cfg: dict, datamodule: Any) -> Any:
        """The task module (``task.name``) for a resolved config as plain containers, sized by what the data
        module reports (``model_facts()``) and given the encoder options the data knows (``context_options()``):
        all plain, saved as hyper-parameters, so checkpoints reload with ``weights_only=True``."""
        cls = self.task_class(plain_cfg["task"]["name"])
        return cls(plain_cfg, **datamodule.model_facts(), context=datamodule.context_options())

    def piece(self, name: str) -> Callable | None:
        """A report / show function, or None when the modality has none."""
        ref = getattr(self, name)
        return resolve(ref) if ref is not None else None


@dataclass(frozen=True)
class Canvas:
    """The positions ``poslab show`` draws an encoder at, supplied by a modality.

    ``layout``: the token grid the positions lie on, in token order (None: a
    sequence; ``(rows, cols)``; ``(frames, rows, cols)``), and ``axes`` its axis
    names. ``context``: the options the modality's data fills in (``max_len``,
    ``grid_size``, ``frames``, ``bidirectional``). ``reference``: the token whose
    scores a large layout shows. ``causal``: a causal model never reads keys
    after the query, so the figure leaves them blank.
    """

    positions: Positions
    length: int
    context: dict[str, Any]
    layout: tuple[int, ...] | None = None
    axes: tuple[str, ...] = ()
    reference: int = 0
    causal: bool = False
    caption: str = ""


_REGISTRY: dict[str, Modality] = {}
_DISCOVERED = False


def register_modality(modality: Modality) -> Modality:
    """Make ``modality`` available under its name (a package calls this in its ``__init__``)."""
    known = _REGISTRY.get(modality.name)
    if known is not None and known != modality:
        raise RuntimeError(f"modality name '{modality.name}' registered twice")
    _REGISTRY[modality.name] = modality
    return modality


def unregister_modality(name: str) -> None:
    """Forget a modality registered from outside the package (tests)."""
    _REGISTRY.pop(name, None)


def _discover() -> None:
    global _DISCOVERED
    if _DISCOVERED:
        return
    _DISCOVERED = True
    package = importlib.import_module(PACKAGE)
    for info in pkgutil.iter_modules(package.__path__):
        if info.ispkg:
            importlib.import_module(f"{PACKAGE}.{info.name}")
    entry_points.load("poslab.modalities")  # installed plugins' modalities


def available_modalities() -> list[str]:
    _discover()
    return sorted(_REGISTRY)


def get_modality(name: Any) -> Modality:
    """The registered modality ``name``; an unknown one is a one-line :class:`ConfigError`."""
    _discover()
    if name not in _REGISTRY:
        valid = available_modalities()
        raise ConfigError(f"unknown modality '{name}'{did_you_mean(str(name), valid)}; valid: {', '.join(valid)}")
    return _REGISTRY[name]
