"""Compose a run's config (OmegaConf) from the YAMLs and the command line, then check it once
(:mod:`~poslab.config.validation`). Later wins::

    train.yaml -> modality/<m>.yaml -> (the dataset's own values) -> model/<preset>.yaml, encoder/<e>.yaml,
    logger/<l>.yaml, trainer/<t>.yaml -> experiment/<x>.yaml (its per_data entry, its encoder_options) -> key=value

A YAML's ``defaults:`` mapping selects groups (``encoder: sincos2d``); the command line selects one with
``group=name``, and ``data=mnist`` (a node with a ``name``) is short for ``data.name=mnist``.
"""

from __future__ import annotations

import dataclasses
import json
import re
import typing
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from poslab.config.checks import check
from poslab.config.files import config_dir, find_config, group_choices, load_yaml
from poslab.config.validation import SIGNATURE_NODES, validate
from poslab.data.sources import source_defaults
from poslab.encoders.registry import available_encoders, encoder_class, encoder_tuning, is_combination, members_of
from poslab.errors import ConfigError, did_you_mean
from poslab.modalities.registry import get_modality
from poslab.run.policy import fixed_on_eval, rule

ALL_ENCODERS = "all"  # `compare_encoders: all`: every encoder that fits the modality, alone or in the list
#: Groups chosen by name; encoder, logger, trainer become a node each, a model preset is laid over the modality's.
GROUPS = ("modality", "encoder", "experiment", "logger", "trainer", "model")
NODE_GROUPS = ("encoder", "logger", "trainer")


def compose(overrides: list[str] | tuple[str, ...] = ()) -> DictConfig:
    """Compose ``train.yaml`` + groups + overrides and check the result."""
    try:
        return _compose(overrides)
    except OmegaConfBaseException as exc:  # e.g. seed=${seed}: one line, not a traceback
        where = f" at '{exc.full_key}'" if getattr(exc, "full_key", None) else ""
        raise ConfigError(f"invalid config{where}: {str(getattr(exc, 'msg', exc)).splitlines()[0]}") from None


def _compose(overrides: list[str] | tuple[str, ...]) -> DictConfig:
    selections, values = parse_overrides(overrides)
    base = load_yaml(find_config("train.yaml") or config_dir() / "train.yaml")
    chain = [_defaults(base)]  # group selections, lowest precedence first
    experiment = selections.get("experiment", chain[0].get("experiment"))
    exp_cfg = load_group("experiment", experiment) if experiment else OmegaConf.create()
    exp_defaults = _defaults(exp_cfg)
    per_data = exp_cfg.pop("per_data", None) or {}  # dataset name -> the experiment's values for that dataset
    modality = selections.get("modality") or exp_defaults.get("modality") or chain[0].get("modality")
    if not modality:
        raise ConfigError("no modality selected; pass modality=<name>")
    mod_cfg = load_group("modality", modality)
    chain += [_defaults(mod_cfg), exp_defaults, selections]
    chosen = {group: next((layer[group] for layer in reversed(chain) if group in layer), None) for group in GROUPS}
    if not chosen["encoder"]:
        raise ConfigError(f"modality '{modality}' has no default encoder; pass encoder=<name>")
    encoder_class(chosen["encoder"], modality)  # an unknown or unfit encoder: one line
    nodes = [{group: load_node(group, chosen[group])} for group in NODE_GROUPS]
    preset = {"model": load_group("model", chosen["model"])} if chosen["model"] else {}
    layers = [base, {"modality": modality, "experiment": experiment}, mod_cfg, preset, *nodes, exp_cfg]
    cfg = _with_values(OmegaConf.merge(*layers), values)
    dataset = source_defaults(modality, OmegaConf.select(cfg, "data.name", default=None))
    for name in per_data:  # a name that is no dataset of the modality: one line naming the valid ones
        check(name, typing.get_type_hints(get_modality(modality).data).get("name", Any), f"per_data.{name}")
    own = per_data.get(OmegaConf.select(cfg, "data.name"), {})  # TSLib's settings differ file by file
    given = cfg.get("encoder_options")
    tuned = encoder_tuning(
        chosen["encoder"], OmegaConf.to_container(given) if OmegaConf.is_config(given) else given or {}
    )
    if dataset or tuned or own:  # the dataset's own values above the modality's; an experiment's options for
        layers = [*layers[:3], {"data": dataset}, *layers[3:], own, {"encoder": tuned}]  # the dataset, and for
        cfg = _with_values(OmegaConf.merge(*layers), values)  # its encoder, above its YAMLs; the command line last
    if cfg.get("compare_encoders") == ALL_ENCODERS:  # `compare_encoders: all`, the list's one-word form
        cfg.compare_encoders = [ALL_ENCODERS]
    _check_explicit_options(cfg, values)
    try:
        return validate(cfg)
    except ConfigError as exc:  # a key a preset set: say which preset, and where it does not fit
        if not any(f"'model.{key}'" in str(exc) for key in preset.get("model", {})):
            raise
        raise ConfigError(f"model={chosen['model']} does not fit modality={modality}: {exc}") from None


def load_group(group: str, choice: str) -> DictConfig:
    """A group's YAML; an encoder without one is its name alone (its options are its constructor's)."""
    path = None if set("/\\") & set(choice) else find_config(f"{group}/{choice}.yaml")  # a name, never a path
    if path is not None:
        return load_yaml(path)
    valid = available_encoders() if group == "encoder" else group_choices(group)
    if choice in valid:
        return OmegaConf.create({"name": choice})
    raise ConfigError(f"unknown {group} '{choice}'{did_you_mean(choice, valid)}; valid: {', '.join(valid)}")


def load_node(group: str, choice: str) -> DictConfig:
    """A group's YAML as its config node; ``encoder=a+b`` (or ``a,a,b``) nests one block per member."""
    if group != "encoder" or not is_combination(choice):
        return load_group(group, choice)
    blocks = {member: load_group(group, member) for member in members_of(choice)}
    return OmegaConf.create(
        {"name": choice, **{m: {k: v for k, v in b.items() if k != "name"} for m, b in blocks.items()}}
    )


def _defaults(cfg: DictConfig) -> dict[str, Any]:
    """A YAML's ``defaults:`` mapping (removed from it): group -> name."""
    raw = cfg.pop("defaults", None)
    defaults = OmegaConf.to_container(raw) if raw is not None else {}
    if not isinstance(defaults, dict) or set(defaults) - set(GROUPS):
        raise ConfigError(f"'defaults' must map groups ({', '.join(GROUPS)}) to names, got {defaults}")
    return defaults


def parse_overrides(items: list[str] | tuple[str, ...]) -> tuple[dict[str, Any], list[tuple[str, Any]]]:
    """``key=value`` strings as group selections (``encoder=rope``) and dotted values (``model.dim=64``)."""
    selections, values = {}, []
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"override '{item}' is not key=value")
        if any(ord(c) < 32 or ord(c) == 127 for c in raw):  # YAML would fold a newline into a space, unseen
            raise ConfigError(f"override '{key}' holds a control character (a newline, a tab): {raw!r}")
        value = _parse_value(item, raw)
        if key not in GROUPS:
            values.append((key, value))
        elif not raw.strip():
            raise ConfigError(f"'{key}=' names no {key}; valid: {', '.join(group_choices(key)) or 'none'}")
        elif key == "logger" and isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            selections[key] = value[0]  # logger=[wandb,csv]: the preset, and file loggers beside it
            values.append(("logger.also", value[1:]))
        elif value is not None and not isinstance(value, str):
            raise ConfigError(f"'{key}' selects a config file by name, got {raw!r}")
        else:
            selections[key] = value
    return selections, values


def _parse_value(item: str, raw: str) -> Any:
    """A command-line value as YAML reads it; a flow mapping may be written without spaces, as Hydra takes it
    (``{early_stopping:{patience:5}}``: YAML needs a space after each colon)."""
    try:
        return _yaml_value(raw)
    except Exception as exc:  # OmegaConf's errors, and YAML's for an unbalanced '{' or '['
        if "{" in raw:
            try:
                return _yaml_value(re.sub(r"([{,]\s*[\w.\-/]+):(?!\s)", r"\1: ", raw))
            except Exception:  # noqa: BLE001  (the first message names what the user wrote)
                pass
        message = getattr(exc, "msg", None) or str(exc) or type(exc).__name__
        raise ConfigError(f"cannot parse the value of '{item}': {message.splitlines()[0]}") from None


def _yaml_value(text: str) -> Any:  # noqa: D103
    return OmegaConf.to_container(OmegaConf.from_dotlist([f"_={text}"]))["_"]


def _with_values(cfg: DictConfig, values: list[tuple[str, Any]]) -> DictConfig:
    """``cfg`` with the command line's dotted values; ``data=x`` is ``data.name=x`` (a node whose schema has a
    name); a value of the wrong shape (a mapping where a list belongs) is one line naming its key."""
    parts = get_modality(cfg.modality) if cfg.get("modality") else None
    named = {k for k, v in cfg.items() if isinstance(v, DictConfig) and "name" in v}
    named |= {
        k for k in ("task", "data") if parts and "name" in {f.name for f in dataclasses.fields(getattr(parts, k))}
    }
    for key, value in values:
        try:
            patch = OmegaConf.create()
            OmegaConf.update(patch, f"{key}.name" if key in named and not isinstance(value, dict) else key, value,
                             force_add=True)  # fmt: skip
            cfg = OmegaConf.merge(cfg, patch)
        except (OmegaConfBaseException, TypeError, ValueError):
            raise ConfigError(f"config key '{key}' cannot take {value!r}") from None
    return cfg


def _check_explicit_options(cfg: DictConfig, values: list[tuple[str, Any]]) -> None:
    """A command-line key that is an option of another choice (``optim.momentum`` with AdamW) is one line: a
    YAML's such keys are left out (they tune another optimiser), the command line's asked for this one."""
    for key, _ in values:
        node, _, sub = key.partition(".")
        if node in SIGNATURE_NODES and sub and isinstance(cfg.get(node), DictConfig):
            schema = SIGNATURE_NODES[node](cfg[node])
            if sub.split(".")[0] in getattr(schema, "foreign", ()):
                options = [f.name for f in dataclasses.fields(schema)]
                raise ConfigError(f"'{key}' is not an option of {schema.label}; its options: {', '.join(options)}")


def recompose(stored: dict, overrides: list[str] | tuple[str, ...] = (), evaluating: bool = True) -> DictConfig:
    """A stored (checkpoint) config with overrides; ``evaluating``: only keys the checkpoint's weights do not
    depend on (:mod:`poslab.run.policy`)."""
    selections, values = parse_overrides(overrides)
    for key in [*selections, *(k for k, _ in values)]:
        if evaluating and not rule(key).evaluate:
            raise ConfigError(f"'{key}' is fixed by the checkpoint; evaluation keeps {fixed_on_eval()}")
    cfg = OmegaConf.merge(OmegaConf.create(stored), *({g: load_node(g, c)} for g, c in selections.items() if c))
    return validate(_with_values(cfg, values))


def to_yaml(cfg: DictConfig) -> str:
    return OmegaConf.to_yaml(cfg)


def to_dict(cfg: DictConfig) -> dict:
    """Plain containers (safe for JSON, W&B and ``torch.load(weights_only=True)``)."""
    return json.loads(json.dumps(OmegaConf.to_container(cfg, resolve=True)))
