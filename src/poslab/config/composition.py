"""Compose and validate a run's config (OmegaConf).

Composition order, later wins::

    train.yaml -> modality/<m>.yaml -> encoder/<e>.yaml, logger/<l>.yaml,
    trainer/<t>.yaml -> experiment/<x>.yaml -> key=value overrides

Any YAML may hold a ``defaults:`` mapping that selects groups
(``encoder: sincos2d``); precedence: command line > experiment > modality >
train.yaml. ``group=name`` on the command line selects a group; ``data=mnist``
(a key whose node has a ``name``) is short for ``data.name=mnist``.
The result is checked against :mod:`poslab.config.schema`: an unknown key or a wrong
type is a :class:`~poslab.errors.ConfigError` naming the full key.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
import typing
from typing import Any, Literal, Union

from omegaconf import DictConfig, ListConfig, OmegaConf, SCMode
from omegaconf.errors import OmegaConfBaseException

from poslab.config.files import (  # noqa: F401 (re-exported)
    config_dir,
    config_dirs,
    find_config,
    group_choices,
    load_yaml,
    modality_positions,
)
from poslab.config.policy import fixed_on_eval, not_computing, rule
from poslab.config.presets import check_logger, entries, preset_schema
from poslab.config.ranges import declared_ranges, range_of
from poslab.config.schema import RUN_NAME_MAX, SIGNATURE_NODES, encoder_schema, root_schema
from poslab.data.sources import source_modules
from poslab.errors import ConfigError, did_you_mean
from poslab.modalities.registry import get_modality

#: ``compare_encoders: all``: every encoder that fits the modality (a new one joins), alone or in the list.
ALL_ENCODERS = "all"
#: Groups chosen by name (a YAML file each under ``configs/<group>/``).
GROUPS = ("modality", "encoder", "experiment", "logger", "trainer")
#: Groups whose YAML becomes a config node of the same name.
NODE_GROUPS = ("encoder", "logger", "trainer")


def load_group(group: str, choice: str) -> DictConfig:
    path = find_config(f"{group}/{choice}.yaml")
    if path is None:
        if group == "encoder":
            from poslab.encoders import available_encoders

            if choice in available_encoders():  # its options and their defaults are its constructor's
                return OmegaConf.create({"name": choice})
            valid = available_encoders()
            raise ConfigError(f"unknown encoder '{choice}'{did_you_mean(choice, valid)}; valid: {', '.join(valid)}")
        valid = group_choices(group)
        raise ConfigError(f"unknown {group} '{choice}'{did_you_mean(choice, valid)}; valid: {', '.join(valid)}")
    return load_yaml(path)


def load_node(group: str, choice: str) -> DictConfig:
    """A group's YAML as its config node; ``encoder=a+b`` (or ``a,a,b``) nests one block per member."""
    from poslab.encoders.registry import is_combination, members_of

    if group != "encoder" or not is_combination(choice):
        return load_group(group, choice)
    blocks = {}
    for member in members_of(choice):
        block = load_group(group, member)
        block.pop("name", None)
        blocks[member] = block
    return OmegaConf.create({"name": choice, **blocks})


# -- overrides ---------------------------------------------------------------
@dataclasses.dataclass
class Overrides:
    """``key=value`` strings split into group selections and dotted values."""

    selections: dict[str, str | None]
    values: list[tuple[str, Any]]

    @classmethod
    def parse(cls, items: list[str] | tuple[str, ...]) -> Overrides:
        selections: dict[str, str | None] = {}
        values: list[tuple[str, Any]] = []
        for item in items:
            item = _from_hydra(item)
            key, sep, raw = item.partition("=")
            key = key.strip()
            if not sep or not key:
                raise ConfigError(f"override '{item}' is not key=value")
            value = _parse_value(item, raw)
            if key in GROUPS:
                if not raw.strip():
                    valid = ", ".join(group_choices(key)) or "none"
                    raise ConfigError(f"'{key}=' names no {key}; valid: {valid}")
                if value is not None and not isinstance(value, str):
                    raise ConfigError(f"'{key}' selects a config file by name, got {raw!r}")
                selections[key] = value
            else:
                values.append((key, value))
        return cls(selections, values)

    def dotlist_config(self, base: DictConfig) -> DictConfig:
        """The dotted values as a config; ``data=x`` becomes ``data.name=x`` (a node whose schema has a name)."""
        out = OmegaConf.create()
        named = _named_nodes(base)
        for key, value in self.values:
            if key in named and not isinstance(value, dict):
                key = f"{key}.name"
            OmegaConf.update(out, key, value, force_add=True)
        return out


#: Hydra keys and what poslab calls them (docs/configuration.md, "Coming from Hydra or LightningCLI").
HYDRA_KEYS = {
    "hydra.run.dir": "run.root and run.name (a run lands in <run.root>/<modality>/<run.name>)",
    "hydra.sweep": "poslab compare (a grid of encoders x seeds) or poslab sweep (W&B)",
    "hydra.job.name": "run.name",
    "hydra": "poslab's own keys (poslab train --options)",
}


def _from_hydra(item: str) -> str:
    """Hydra's override prefixes, where they mean something here: ``+key=v`` / ``++key=v`` (add / force-add)
    set a declared key like ``key=v``; ``~key`` (delete) and ``hydra.*`` keys are one line saying what to use."""
    if item.startswith("~"):
        key = item[1:].split("=", 1)[0]
        raise ConfigError(
            f"'{item}': every key is declared and cannot be removed; set {key}=VALUE (defaults: poslab train --options)"
        )
    item = item.removeprefix("++").removeprefix("+")
    key = item.split("=", 1)[0].strip()
    if key == "hydra" or key.startswith("hydra."):
        where = next(v for k, v in HYDRA_KEYS.items() if key == k or key.startswith(f"{k}."))
        raise ConfigError(f"'{key}' is a Hydra key; poslab's equivalent: {where}")
    return item


def _parse_value(item: str, raw: str) -> Any:
    """A command-line value as YAML reads it; a flow mapping may be written without spaces, as Hydra takes it
    (``{early_stopping:{patience:5}}``: YAML needs a space after each colon)."""

    try:
        return OmegaConf.to_container(OmegaConf.from_dotlist([f"_={raw}"]))["_"]
    except Exception as exc:  # OmegaConf's errors, and YAML's for an unbalanced '{' or '['
        if "{" in raw:
            spaced = re.sub(r"([{,]\s*[\w.\-/]+):(?!\s)", r"\1: ", raw)
            try:
                return OmegaConf.to_container(OmegaConf.from_dotlist([f"_={spaced}"]))["_"]
            except Exception:  # noqa: BLE001  (the original message names what the user wrote)
                pass
        message = getattr(exc, "msg", None) or str(exc) or type(exc).__name__
        raise ConfigError(f"cannot parse the value of '{item}': {message.splitlines()[0]}") from None


def _named_nodes(cfg: DictConfig) -> set[str]:
    """Top-level keys whose node has a ``name`` (in the config, or declared by its modality's schema)."""

    named = {k for k, v in cfg.items() if isinstance(v, DictConfig) and "name" in v}
    if cfg.get("modality"):
        parts = get_modality(cfg.modality)
        named |= {k for k in ("task", "data") if "name" in {f.name for f in dataclasses.fields(getattr(parts, k))}}
    return named


# -- composition ---------------------------------------------------------------
def compose(overrides: list[str] | tuple[str, ...] = ()) -> DictConfig:
    """Compose ``train.yaml`` + groups + overrides and validate the result."""
    try:
        return _compose(overrides)
    except OmegaConfBaseException as exc:  # e.g. seed=${seed}: one line, not a traceback
        where = f" at '{exc.full_key}'" if getattr(exc, "full_key", None) else ""
        raise ConfigError(
            f"invalid config{where}: {str(exc.msg if hasattr(exc, 'msg') else exc).splitlines()[0]}"
        ) from None


def _compose(overrides: list[str] | tuple[str, ...]) -> DictConfig:
    cli = Overrides.parse(overrides)
    base = load_yaml(find_config("train.yaml") or config_dir() / "train.yaml")
    chain = [_pop_defaults(base)]  # lowest precedence first

    experiment = cli.selections.get("experiment", chain[0].get("experiment"))
    exp_cfg = load_group("experiment", experiment) if experiment else OmegaConf.create()
    exp_defaults = _pop_defaults(exp_cfg)

    modality = cli.selections.get("modality") or exp_defaults.get("modality") or chain[0].get("modality")
    if not modality:
        raise ConfigError("no modality selected; pass modality=<name>")
    mod_cfg = load_group("modality", modality)
    chain += [_pop_defaults(mod_cfg), exp_defaults, cli.selections]

    def select(group: str) -> str | None:
        chosen = None
        for layer in chain:
            if group in layer:
                chosen = layer[group]
        return chosen

    from poslab.encoders import encoder_class

    encoder = select("encoder")
    if not encoder:
        raise ConfigError(f"modality '{modality}' has no default encoder; pass encoder=<name>")
    encoder_class(encoder, modality)  # unknown / unfit encoder: clear error

    layers = [
        base,
        {"modality": modality, "experiment": experiment},
        mod_cfg,
        *({group: load_node(group, select(group))} for group in NODE_GROUPS),
        exp_cfg,
    ]
    cfg = _merge_overrides(OmegaConf.merge(*layers), cli)
    if cfg.get("compare_encoders") == ALL_ENCODERS:  # `compare_encoders: all`, the list's one-word form
        cfg.compare_encoders = [ALL_ENCODERS]
    dataset = source_defaults(modality, OmegaConf.select(cfg, "data.name", default=None))
    if dataset:  # the dataset's own values, above the modality's, below the experiment's and the command line's
        layers = [*layers[:3], {"data": dataset}, *layers[3:]]
        cfg = _merge_overrides(OmegaConf.merge(*layers), cli)
    given = cfg.get("encoder_options")
    tuned = encoder_tuning(encoder, OmegaConf.to_container(given) if OmegaConf.is_config(given) else given or {})
    if tuned:  # an experiment's options for this encoder: above its YAMLs, below the command line
        cfg = _merge_overrides(OmegaConf.merge(*layers, {"encoder": tuned}), cli)
    _check_explicit_options(cfg, cli)
    return validate(cfg)


def encoder_tuning(encoder: str, options: Any) -> dict[str, Any]:
    """The ``encoder.*`` values ``encoder_options`` (encoder name -> its options) gives ``encoder``: its own
    entry, or one per member of a composite or per-layer pattern (under the member's block). A name that is
    no encoder, or options that are not a mapping, is one line."""
    from poslab.encoders import available_encoders
    from poslab.encoders.registry import is_combination, members_of

    if not isinstance(options, dict) or not all(isinstance(v, dict) for v in options.values()):
        raise ConfigError(f"encoder_options must map encoder names to their options, got {options!r}")
    known = available_encoders()
    for name, given in options.items():
        if name not in known:
            raise ConfigError(f"encoder_options names no encoder '{name}'{did_you_mean(name, known)}")
        valid = [f.name for f in dataclasses.fields(encoder_schema(name)) if f.name != "name"]
        for key in given:  # checked whichever encoder runs: a typo for another one is found too
            if key not in valid:
                full = f"encoder_options.{name}.{key}"
                raise ConfigError(f"unknown config key '{full}'{did_you_mean(key, valid)}; {name}'s options: "
                                  f"{', '.join(valid) or 'none'}")  # fmt: skip
    if is_combination(encoder):
        return {member: options[member] for member in members_of(encoder) if member in options}
    return dict(options.get(encoder, {}))


def source_defaults(modality: str, name: str | None) -> dict[str, Any]:
    """``data.*`` values the dataset ``name`` of ``modality`` declares for itself (CIFAR-10's 32-px images
    take 8-px patches, not MNIST's 7), or none."""
    if name is None:
        name = next((f.default for f in dataclasses.fields(get_modality(modality).data) if f.name == "name"), None)

    package = source_modules().get(modality)
    source = getattr(package, "SOURCES", {}).get(name) if package else None
    return dict(getattr(source, "defaults", None) or {})


def _check_explicit_options(cfg: DictConfig, cli: Overrides) -> None:
    """A command-line key that is an option of another choice (``optim.momentum`` with AdamW) is one line:
    a YAML's such keys are left out (they tune another optimiser), the command line's asked for this one."""

    for key, _ in cli.values:
        node, _, sub = key.partition(".")
        if node in SIGNATURE_NODES and sub and isinstance(cfg.get(node), DictConfig):
            schema = SIGNATURE_NODES[node](cfg[node])
            if sub.split(".")[0] in getattr(schema, "foreign", ()):
                options = [f.name for f in dataclasses.fields(schema)]
                raise ConfigError(f"'{key}' is not an option of {schema.label}; its options: {', '.join(options)}")


def _merge_overrides(cfg: DictConfig, cli: Overrides) -> DictConfig:
    """``cfg`` with the command line's dotted values; a value of the wrong shape (a mapping where a list
    belongs) is one line naming its key."""
    try:
        return OmegaConf.merge(cfg, cli.dotlist_config(cfg))
    except (OmegaConfBaseException, TypeError, ValueError) as exc:
        for key, value in cli.values:
            try:
                OmegaConf.merge(cfg, Overrides({}, [(key, value)]).dotlist_config(cfg))
            except (OmegaConfBaseException, TypeError, ValueError):
                raise ConfigError(f"config key '{key}' cannot take {value!r}") from None
        raise ConfigError(f"invalid overrides: {str(exc).splitlines()[0]}") from None


def recompose(stored: dict, overrides: list[str] | tuple[str, ...] = (), evaluating: bool = True) -> DictConfig:
    """A stored (checkpoint) config with overrides; ``evaluating``: only keys the checkpoint's weights do not
    depend on (:mod:`poslab.config.policy`)."""

    cli = Overrides.parse(overrides)
    for key in [*cli.selections, *(k for k, _ in cli.values)]:
        if evaluating and not rule(key).evaluate:
            raise ConfigError(f"'{key}' is fixed by the checkpoint; evaluation keeps {fixed_on_eval()}")
    cfg = OmegaConf.create(stored)
    cfg = OmegaConf.merge(cfg, *({g: load_node(g, c)} for g, c in cli.selections.items() if c))
    return validate(_merge_overrides(cfg, cli))


def _pop_defaults(cfg: DictConfig) -> dict[str, Any]:
    raw = cfg.pop("defaults", None)
    defaults = OmegaConf.to_container(raw) if raw is not None else {}
    if not isinstance(defaults, dict) or set(defaults) - set(GROUPS):
        raise ConfigError(f"'defaults' must map groups ({', '.join(GROUPS)}) to names, got {defaults}")
    return defaults


# -- validation --------------------------------------------------------------------
def validate(cfg: DictConfig) -> DictConfig:
    """Check ``cfg`` against the schema of its modality and encoder; return it typed."""
    from poslab.encoders import encoder_class

    modality = cfg.get("modality")
    parts = get_modality(modality)  # an unknown modality: one line naming the valid ones
    encoder = OmegaConf.select(cfg, "encoder.name")
    encoder_class(encoder, modality)
    schema = root_schema(parts, encoder_schema(encoder))
    structured = OmegaConf.structured(schema)
    _check_keys(cfg, structured, "")
    try:
        merged = OmegaConf.merge(structured, cfg)
    except (OmegaConfBaseException, TypeError) as exc:  # TypeError: a mapping where a list belongs
        raise _type_error(exc, cfg, structured, schema) from None
    missing = sorted(OmegaConf.missing_keys(merged))
    if missing:
        raise ConfigError(f"config key '{missing[0]}' has no value; set it with {missing[0]}=...")
    try:
        OmegaConf.resolve(merged)
    except OmegaConfBaseException as exc:
        raise ConfigError(f"cannot resolve config key '{exc.full_key}': {exc.msg.splitlines()[0]}") from None

    ranges, checks = dict(declared_ranges(schema)), []
    for name, schema_of in SIGNATURE_NODES.items():
        node_schema = schema_of(merged[name])
        ranges.update(declared_ranges(node_schema, f"{name}."))
        merged[name] = typed_node(merged[name], node_schema, name)
        if check := getattr(node_schema, "check", None):  # what holds between the node's keys
            checks.append((check, name))
    merged.callbacks = _typed_callbacks(OmegaConf.to_container(merged.callbacks))
    check_logger(OmegaConf.to_container(merged.callbacks), merged.logger.name)
    check_values(merged, {**ranges, **parts.ranges})
    for check, name in checks:
        check(merged[name])
    problem = parts.check(merged) if parts.check else None
    if problem:
        raise ConfigError(problem)
    return merged


def typed_node(node: DictConfig, schema: type, name: str) -> dict[str, Any]:
    """The keys ``node`` sets, typed by ``schema`` (a signature's options,
    :data:`poslab.config.schema.SIGNATURE_NODES`): a key poslab owns, an unknown key, a wrong type or a value
    outside the listed choices is one line."""
    owned, foreign = getattr(schema, "owned", {}), getattr(schema, "foreign", set())
    node = {key: value for key, value in node.items() if key not in foreign}  # set for another choice
    for key in node:
        if key in owned:
            raise ConfigError(f"'{name}.{key}' is not a config key: it is set by {owned[key]}")
    wrapper, given = schema, dict(node)
    for part in reversed(name.split(".")):  # nested under its full name, so errors name the full key
        wrapper = dataclasses.make_dataclass("Node", [(part, wrapper, dataclasses.field(default_factory=wrapper))])
        given = {part: given}
    structured, given = OmegaConf.structured(wrapper), OmegaConf.create(given)
    _check_keys(given, structured, "")
    try:
        typed = OmegaConf.select(OmegaConf.merge(structured, given), name)
    except (OmegaConfBaseException, TypeError) as exc:
        raise _type_error(exc, given, structured, wrapper) from None
    for key, allowed in getattr(schema, "choices", {}).items():
        if key in node and typed[key] not in allowed:
            shown = list(dict.fromkeys(str(a) for a in allowed if a is not None))  # 16 and '16' once
            raise ConfigError(
                f"config key '{name}.{key}' cannot take {typed[key]!r}{did_you_mean(str(typed[key]), shown)}; "
                f"valid: {', '.join(shown)}{' or null' if None in allowed else ''}"
            )
    plain = OmegaConf.to_container(typed, resolve=True)
    return {key: plain[key] for key in node}


def _typed_callbacks(listed: list) -> list:
    """``callbacks``' presets checked by name and their options against their Lightning class's signature."""
    if not listed:
        return []

    typed = []
    for name, options in entries(listed):
        options = typed_node(options, preset_schema(name), f"callbacks.{name}")
        typed.append({name: options} if options else name)
    return typed


def check_values(cfg: DictConfig, ranges: dict) -> None:
    """Every float finite, every key of ``ranges`` (those the schema declares:
    :func:`poslab.config.ranges.declared_ranges`) in its range, ``run.name`` one path component: one
    :class:`ConfigError` line naming the key, the value and
    what is allowed."""

    def floats(node: Any, prefix: str):
        for key, value in node.items() if isinstance(node, dict) else enumerate(node):
            full = f"{prefix}{key}" if isinstance(node, dict) else prefix.rstrip(".")
            if isinstance(value, (dict, list)):
                yield from floats(value, f"{full}.")
            elif isinstance(value, float):
                yield full, value

    plain = OmegaConf.to_container(cfg, resolve=True)
    for key, value in floats(plain, ""):
        if not math.isfinite(value):
            raise ConfigError(f"config key '{key}' must be a finite number, got {value}")
    for key, allowed in ranges.items():
        value = OmegaConf.select(cfg, key, default=None)
        values = [value] if value is None or isinstance(value, (str, int, float)) else list(value)
        for item in values:
            if isinstance(item, (int, float)) and not isinstance(item, bool) and not allowed.holds(item):
                raise ConfigError(f"config key '{key}' must be {allowed.describe()}, got {item!r}")
    name = OmegaConf.select(cfg, "run.name", default=None)
    if name is not None:
        name = str(name)
        if not name or name in (".", "..") or "/" in name or "\\" in name or len(name) > RUN_NAME_MAX:
            raise ConfigError(
                f"run.name must be one folder name (no '/', not '.' or '..', 1-{RUN_NAME_MAX} characters), "
                f"got {name[:60]!r}{'…' if len(name) > 60 else ''}"
            )


def _check_keys(cfg: DictConfig, schema: DictConfig, prefix: str) -> None:
    """Unknown keys anywhere in ``cfg``, reported with the closest valid key."""
    known = list(schema.keys())  # `in` treats MISSING values as absent
    for key in cfg:
        full = f"{prefix}{key}"
        if key not in known:
            valid = [f"{prefix}{k}" for k in known]
            raise ConfigError(f"unknown config key '{full}'{did_you_mean(full, valid)}")
        child, child_schema = cfg._get_node(key), schema._get_node(key)
        if isinstance(child, DictConfig) and isinstance(child_schema, DictConfig) and not child._is_none():
            if child_schema._is_none():  # an optional block that defaults to null (rope's scaling): its type's keys
                child_schema = OmegaConf.structured(child_schema._metadata.ref_type)
            if OmegaConf.get_type(child_schema) is dict:  # a mapping with free keys (compare_variants)
                continue
            _check_keys(child, child_schema, f"{full}.")


def _type_error(exc: OmegaConfBaseException, cfg: DictConfig, structured: DictConfig, schema: type) -> ConfigError:
    key = getattr(exc, "full_key", None) or _first_bad_leaf(cfg, structured)
    if not key:
        return ConfigError(f"invalid config: {str(exc).splitlines()[0]}")
    value = OmegaConf.select(cfg, key)
    if isinstance(value, (DictConfig, ListConfig)):
        value = OmegaConf.to_container(value)
    return ConfigError(f"config key '{key}' expects {describe_type(_field_type(schema, key))}, got {value!r}")


_ABSENT = object()


def _has_key(node: DictConfig, key: str) -> bool:
    try:
        return OmegaConf.select(node, key, default=_ABSENT) is not _ABSENT
    except OmegaConfBaseException:  # a name indexing a list
        return False


def _first_bad_leaf(cfg: DictConfig, structured: DictConfig) -> str | None:
    """When OmegaConf does not say which key failed (tuples, a mapping given for a list), try each leaf alone;
    the key named is the deepest the schema has (``eval.multiples``, not ``eval.multiples.a``)."""
    for path, value in _leaves(OmegaConf.to_container(cfg)):
        patch = OmegaConf.create()
        OmegaConf.update(patch, path, value, force_add=True)
        try:
            OmegaConf.merge(structured, patch)
        except (OmegaConfBaseException, TypeError):  # TypeError: a mapping where a list belongs
            parts = path.split(".")
            known = [".".join(parts[:n]) for n in range(len(parts), 0, -1)]
            return next((k for k in known if _has_key(structured, k)), path)
    return None


def _leaves(node: Any, prefix: str = ""):
    if isinstance(node, dict) and node:
        for key, value in node.items():
            yield from _leaves(value, f"{prefix}{key}.")
    else:
        yield prefix.rstrip("."), node


def _field_type(schema: type, key: str) -> Any:
    current: Any = schema
    for part in key.split("."):
        part, *indices = part.replace("]", "").split("[")  # ``rope_scaling[0]``: an item of a list
        if typing.get_origin(current) is Union:  # an optional block (``RopeScaling | None``): its dataclass
            current = next((a for a in typing.get_args(current) if dataclasses.is_dataclass(a)), current)
        hints = typing.get_type_hints(current) if dataclasses.is_dataclass(current) else {}
        if part not in hints:
            return Any
        current = hints[part]
        for _ in indices:
            items = typing.get_args(current) if typing.get_origin(current) is list else ()
            current = items[0] if items else Any
    return current


def describe_type(annotation: Any) -> str:
    """A type hint as words: ``int or null``, ``one of 'raw', 'rescaled'``."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin is Union:
        parts = [describe_type(a) for a in args if a is not type(None)]
        return " or ".join(parts) + (" or null" if type(None) in args else "")
    if origin in (tuple, list):
        if origin is tuple:
            return "a list [" + ", ".join(describe_type(a) for a in args) + "]"
        return f"a list of {describe_type(args[0]) if args else 'values'}"
    if dataclasses.is_dataclass(annotation):
        return "a mapping"
    return getattr(annotation, "__name__", str(annotation))


def declared_default(f: dataclasses.Field) -> Any:
    """A schema field's declared default (a factory's value), or ``dataclasses.MISSING`` for a key that only
    has the YAML's value."""
    if f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
        return OmegaConf.to_container(OmegaConf.structured(value)) if dataclasses.is_dataclass(value) else value
    return dataclasses.MISSING if f.default in (dataclasses.MISSING, "???") else f.default


def option_rows(cfg: DictConfig) -> list[tuple[str, str, str, str]]:
    """``(key, type, default, value)`` for every key of ``cfg``'s schema: the options of its modality, encoder
    and model as their schemas (derived from the constructors where they can be) declare them; the type says
    the range where one is declared."""

    schema = root_schema(get_modality(cfg.modality), encoder_schema(cfg.encoder.name))
    rows = []

    def walk(node: Any, prefix: str) -> None:
        for f in dataclasses.fields(node):
            key = f"{prefix}{f.name}"
            if key in SIGNATURE_NODES:  # sparse: every key its signature declares
                walk(SIGNATURE_NODES[key](cfg[key]), f"{key}.")
                continue
            hint = typing.get_type_hints(node).get(f.name, Any)
            if dataclasses.is_dataclass(hint):
                walk(hint, f"{key}.")
                continue
            declared = declared_default(f)
            default = "—" if declared is dataclasses.MISSING else repr(declared)  # "—": the YAML's value only
            value = OmegaConf.select(cfg, key, default=declared, throw_on_missing=False)  # unset: the default
            value = OmegaConf.to_container(value) if isinstance(value, (DictConfig, ListConfig)) else value
            allowed = range_of(typing.get_type_hints(node, include_extras=True).get(f.name))
            each = "each " if typing.get_origin(hint) in (list, tuple) else ""
            kind = describe_type(hint) + (f", {each}{allowed.describe()}" if allowed else "")
            rows.append((key, kind, default, repr(value)))

    walk(schema, "")
    return rows


def to_yaml(cfg: DictConfig) -> str:
    return OmegaConf.to_yaml(cfg)


def to_dict(cfg: DictConfig) -> dict:
    """Plain containers (safe for JSON, W&B and ``torch.load(weights_only=True)``)."""
    container = OmegaConf.to_container(cfg, resolve=True, structured_config_mode=SCMode.DICT)
    return _plain(container)


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def config_hash(cfg: dict, ignore: tuple[str, ...] = ()) -> str:
    """A short stable hash of what a run computes: equal configs, equal hashes."""

    plain = json.loads(json.dumps(cfg))  # a deep copy of plain containers
    plain = {k: v for k, v in plain.items() if v not in ({}, [])}  # an empty node computes nothing

    for dotted in (*not_computing(), *ignore):
        node, *path = dotted.split(".")
        parent, key = (plain, node) if not path else (plain.get(node, {}), path[-1])
        if isinstance(parent, dict):
            parent.pop(key, None)
    return hashlib.sha256(json.dumps(plain, sort_keys=True).encode()).hexdigest()[:10]
