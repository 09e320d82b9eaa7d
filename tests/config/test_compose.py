"""Config composition and every kind of validation error."""

from __future__ import annotations

import dataclasses
import re
import typing
from typing import Literal

import pytest
from omegaconf import OmegaConf

from poslab.config.checks import declared_default
from poslab.config.composition import compose, recompose, to_dict
from poslab.config.files import config_dir, find_config
from poslab.config.validation import root_schema
from poslab.encoders import available_encoders, encoder_options
from poslab.encoders.registry import encoder_schema
from poslab.errors import ConfigError
from poslab.modalities import available_modalities, get_modality
from poslab.tools.options import option_rows

GROUPS = ("task", "data", "eval", "model", "logger")


def test_default_composition_is_vision_with_sincos2d():
    cfg = compose()
    assert cfg.modality == "vision"
    assert cfg.encoder.name == "sincos2d"
    assert cfg.logger.name == "wandb" and cfg.logger.mode == "auto"
    assert cfg.trainer.name == "cpu"
    assert "defaults" not in cfg


def test_group_selection_replaces_the_encoder_node():
    cfg = compose(["encoder=rope2d"])
    assert set(cfg.encoder) == {"name", "base", "layout"}
    assert cfg.encoder.base == 100.0


def test_presets_merge_onto_the_base_settings():
    cfg = compose(["trainer=gpu", "logger=csv"])
    assert cfg.trainer.precision == "bf16-mixed" and cfg.trainer.accelerator == "gpu"
    assert cfg.trainer.max_epochs == 30  # from modality/vision.yaml, untouched by the preset
    assert cfg.logger.name == "csv" and cfg.logger.project == "poslab"


def test_ddp_preset_exposes_devices_and_nodes():
    cfg = compose(["trainer=ddp", "trainer.devices=4", "trainer.num_nodes=2"])
    assert (cfg.trainer.strategy, cfg.trainer.devices, cfg.trainer.num_nodes) == ("ddp", 4, 2)


def test_overrides_win_and_are_typed():
    cfg = compose(["data.image_size=56", "optim.lr=1e-3", "trainer.limit_train_batches=2"])
    assert cfg.data.image_size == 56
    assert cfg.optim.lr == pytest.approx(1e-3)
    assert cfg.trainer.limit_train_batches == 2 and isinstance(cfg.trainer.limit_train_batches, int)


def test_name_shorthand_selects_a_dataset():
    assert compose(["data=fashion_mnist"]).data.name == "fashion_mnist"


def test_experiment_defaults_and_values_apply(tmp_path, monkeypatch):
    for sub in ("modality", "encoder", "logger", "trainer", "experiment"):
        (tmp_path / sub).mkdir()
        for f in (config_dir() / sub).glob("*.yaml"):
            (tmp_path / sub / f.name).write_text(f.read_text())
    (tmp_path / "train.yaml").write_text((config_dir() / "train.yaml").read_text())
    (tmp_path / "experiment" / "probe.yaml").write_text("defaults:\n  encoder: rope2d\ndata:\n  image_size: 56\n")
    monkeypatch.setenv("POSLAB_CONFIG_DIR", str(tmp_path))
    cfg = compose(["experiment=probe"])
    assert (cfg.experiment, cfg.encoder.name, cfg.data.image_size) == ("probe", "rope2d", 56)
    assert compose(["experiment=probe", "encoder=none"]).encoder.name == "none"  # command line wins


def test_an_encoder_yaml_exists_only_where_it_differs_from_its_constructor():
    """encoder=NAME needs no YAML (its options are its constructor's); a YAML sets only other values."""
    yamls = list((config_dir() / "encoder").glob("*.yaml"))
    assert yamls, "cyclic's periods differ from its constructor's"
    for path in yamls:
        node = OmegaConf.load(path)
        assert node.name == path.stem and path.stem in available_encoders()
        restated = _restated_defaults(node, encoder_schema(path.stem), "encoder.")
        assert not restated and set(node) - {"name"}, (path.name, restated)
    for name in available_encoders():
        assert set(compose_encoder(name)) - {"name"} == set(encoder_options(name)), name


def compose_encoder(name: str) -> dict:
    modality = next(m for m in available_modalities() if name in available_encoders(m))
    return OmegaConf.to_container(compose([f"modality={modality}", f"encoder={name}"]).encoder)


def _restated_defaults(node, schema: type, prefix: str) -> list[str]:
    """Keys of a YAML ``node`` whose value equals the default ``schema`` declares for them."""
    hints = typing.get_type_hints(schema)
    fields = {f.name: f for f in dataclasses.fields(schema)}
    out = []
    for key, value in node.items():
        if key not in fields:
            continue
        if dataclasses.is_dataclass(hints[key]):
            out += _restated_defaults(value, hints[key], f"{prefix}{key}.")
            continue
        declared = declared_default(fields[key])
        declared = list(declared) if isinstance(declared, tuple) else declared
        plain = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
        if declared is not dataclasses.MISSING and plain == declared:
            out.append(f"{prefix}{key}")
    return out


@pytest.mark.parametrize("modality", available_modalities())
def test_an_option_is_declared_once_and_the_yaml_sets_only_other_values(modality):
    """task / data / eval / model / logger options carry their defaults in code; no YAML repeats one."""
    schema = root_schema(get_modality(modality), encoder_schema("none"))
    groups = {f.name: f.default_factory for f in dataclasses.fields(schema) if f.name in GROUPS}
    for path in (find_config(f"modality/{modality}.yaml"), config_dir() / "train.yaml"):
        node = OmegaConf.load(path)
        restated = [k for g in GROUPS if g in node for k in _restated_defaults(node[g], groups[g], f"{g}.")]
        assert not restated, f"{path.name} restates declared defaults: {restated}"
    rows = {key: default for key, _, default, _ in option_rows(compose([f"modality={modality}"]))}
    undeclared = [k for k, default in rows.items() if k.split(".")[0] in GROUPS and default == "—"]
    # what a modality must choose (its model's size, the forecaster's layout) and the logger preset's name
    assert set(undeclared) <= {"logger.name", "model.dim", "model.depth", "model.num_heads", "model.layout"}, undeclared


def test_the_check_for_restated_defaults_finds_one():
    schema = root_schema(get_modality("video"), encoder_schema("none"))
    data = next(f.default_factory for f in dataclasses.fields(schema) if f.name == "data")
    assert _restated_defaults(OmegaConf.create({"frames": 8, "canvas": 64}), data, "data.") == ["data.frames"]


# -- errors: one line, naming the key and the closest valid choice ----------------------
def test_rope_scaling_is_set_key_by_key_from_the_command_line():
    """``scaling`` defaults to null: its keys still validate against RopeScaling (they were rejected as unknown)."""
    cfg = compose(["modality=text", "encoder=rope", "encoder.scaling.type=yarn", "encoder.scaling.factor=4"])
    assert cfg.encoder.scaling.type == "yarn" and cfg.encoder.scaling.factor == 4.0
    assert cfg.encoder.scaling.beta_fast == 32.0  # the rest from the dataclass defaults


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["data.imag_size=32"], "unknown config key 'data.imag_size' (did you mean 'data.image_size'?)"),
        (["encodr=rope2d"], "unknown config key 'encodr' (did you mean 'encoder'?)"),
        (["encoder=rope2d", "encoder.bse=10"], "unknown config key 'encoder.bse' (did you mean 'encoder.base'?)"),
        (["data.patch_size=seven"], "config key 'data.patch_size' expects int, got 'seven'"),
        (["seed=1.5"], "config key 'seed' expects int, got 1.5"),
        (["data.coords=pixels"], "config key 'data.coords' expects one of 'raw', 'rescaled', got 'pixels'"),
        (["encoder=rope2d", "encoder.layout=neox"], "expects one of 'interleaved', 'half', got 'neox'"),
        (["encoder=learned2d", "encoder.grid_size=[1,2,3]"], "'encoder.grid_size' expects a list [int, int] or null"),
        (["data.image_size=big"], "config key 'data.image_size' expects int or null, got 'big'"),
        (["logger.mode=sometimes"], "expects one of 'auto', 'online', 'offline', 'disabled'"),
        (["data=imagenet"], "config key 'data.name' expects one of 'mnist5k', 'mnist', 'fashion_mnist', 'cifar10'"),
        (
            ["encoder=rope4d"],
            "unknown encoder 'rope4d' (did you mean 'rope2d'?); valid for vision: comrope, cope, fox,",
        ),
        (["logger=mlflow"], "unknown logger 'mlflow'; valid: csv, none, tensorboard, wandb"),
        (["modality=no_such_modality"], "unknown modality 'no_such_modality'"),
        (["trainer.max_epochs"], "override 'trainer.max_epochs' is not key=value"),
        (["encoder=[a,b]"], "'encoder' selects a config file by name"),
        (["modality=text", "eval.multiples={a: 1}"], "config key 'eval.multiples' expects a list of int, got {'a': 1}"),
        (
            ["modality=text", "encoder=rope", "encoder.scaling.typ=yarn"],
            "unknown config key 'encoder.scaling.typ' (did you mean 'encoder.scaling.type'?)",
        ),
        (
            ["modality=text", "encoder=rope", "encoder.scaling.type=warp"],
            "'encoder.scaling.type' expects one of 'none', 'linear', 'ntk', 'dynamic', 'yarn', 'llama3', "
            "'longrope', got 'warp'",
        ),
    ],
)
def test_bad_overrides_are_one_line_errors(overrides, message):
    with pytest.raises(ConfigError) as info:
        compose(overrides)
    text = str(info.value)
    assert message in text
    assert "\n" not in text


def test_an_encoder_that_does_not_fit_the_modality_says_which_do(monkeypatch):
    from poslab.encoders import registry
    from poslab.encoders.base import PositionEncoder

    class StepsOnly(PositionEncoder):
        reads = "steps"

    monkeypatch.setitem(registry._REGISTRY, "stepsonly", StepsOnly)
    StepsOnly.name = "stepsonly"
    with pytest.raises(ConfigError) as info:
        compose(["encoder=stepsonly"])
    text = str(info.value)
    assert (
        f"encoder 'stepsonly' does not fit modality 'vision' (it reads positions.steps: it fits {steps_modalities()})"
        in text
    )
    assert "encoders for vision: " + ", ".join(available_encoders("vision")) in text


def test_missing_values_are_named(tmp_path, monkeypatch):
    for sub in ("modality", "encoder", "logger", "trainer"):
        (tmp_path / sub).mkdir()
        for f in (config_dir() / sub).glob("*.yaml"):
            (tmp_path / sub / f.name).write_text(f.read_text())
    base = (config_dir() / "train.yaml").read_text().replace("seed: 0", "")
    (tmp_path / "train.yaml").write_text(base)
    monkeypatch.setenv("POSLAB_CONFIG_DIR", str(tmp_path))
    with pytest.raises(ConfigError, match="config key 'seed' has no value"):
        compose()


def test_recompose_allows_data_changes_and_refuses_model_changes():
    stored = to_dict(compose(["encoder=rope2d"]))
    cfg = recompose(stored, ["data.image_size=56", "data.coords=raw", "logger=none"])
    assert (cfg.data.image_size, cfg.data.coords, cfg.logger.name) == (56, "raw", "none")
    assert cfg.encoder.name == "rope2d"
    for bad in (["encoder=none"], ["model.dim=128"], ["encoder.base=5"]):
        with pytest.raises(ConfigError, match="is fixed by the checkpoint"):
            recompose(stored, bad)


def test_to_dict_gives_plain_containers():
    plain = to_dict(compose(["encoder=learned2d", "encoder.grid_size=[4,4]"]))
    assert plain["encoder"]["grid_size"] == [4, 4]
    assert type(plain["data"]) is dict


def test_a_registered_encoder_without_a_yaml_takes_its_constructors_defaults(monkeypatch):
    from poslab.encoders import registry
    from poslab.encoders.base import PositionEncoder

    class Fresh(PositionEncoder):
        reads = "steps"

        def __init__(self, dim: int, num_heads: int, reach: int = 5, mode: Literal["a", "b"] = "a") -> None:
            super().__init__(dim, num_heads)

    monkeypatch.setitem(registry._REGISTRY, "fresh", Fresh)
    monkeypatch.setattr(Fresh, "name", "fresh", raising=False)
    cfg = compose(["modality=text", "encoder=fresh", "encoder.mode=b"])
    assert OmegaConf.to_container(cfg.encoder) == {"name": "fresh", "reach": 5, "mode": "b"}
    with pytest.raises(ConfigError, match=r"unknown encoder 'frsh' \(did you mean 'fresh'\?\)"):
        compose(["modality=text", "encoder=frsh"])


def test_a_value_error_in_an_encoders_constructor_is_one_config_error(monkeypatch):
    from poslab.encoders import build_encoder, registry
    from poslab.encoders.base import PositionEncoder

    class Picky(PositionEncoder):
        def __init__(self, dim: int, num_heads: int, order: int = 2) -> None:
            super().__init__(dim, num_heads)
            if order < 1:
                raise ValueError(f"order must be >= 1,\n got {order}")

    monkeypatch.setitem(registry._REGISTRY, "picky", Picky)
    with pytest.raises(ConfigError, match=r"^encoder 'picky': order must be >= 1, got 0$"):
        build_encoder("picky", dim=8, num_heads=2, order=0)


def test_a_dataset_carries_its_own_defaults_below_the_experiment_and_the_command_line(monkeypatch):
    """CIFAR-10's 32-px images take 8-px patches without every command saying so."""
    from poslab.modalities.vision.sources import SOURCES

    assert compose(["data=cifar10"]).data.patch_size == 8
    assert compose(["data=cifar10", "data.patch_size=4"]).data.patch_size == 4
    assert compose([]).data.patch_size == 7  # MNIST's
    import dataclasses

    monkeypatch.setitem(SOURCES, "mnist5k", dataclasses.replace(SOURCES["mnist5k"], defaults={"val_size": 123}))
    assert compose([]).data.val_size == 123  # the default dataset's own values too


def test_an_experiments_per_data_entry_applies_to_its_dataset_below_the_command_line(tmp_path, monkeypatch):
    """``per_data``: the values TSLib's script gives each file, for the dataset a run reads; the experiment's
    own for the others; the command line above both; a name that is no dataset is one line."""
    weather = compose(["experiment=tslib", "data=weather"])
    assert (weather.model.depth, weather.trainer.max_epochs, weather.data.batch_size) == (2, 3, 32)
    assert weather.compare_variants.h192 == ["data.horizon=192", "model.num_heads=16"]
    assert weather.expect[0] == "best */mean: test/mse <= 1.05 * 0.259"
    etth1 = compose(["experiment=tslib"])
    assert (etth1.model.depth, etth1.trainer.max_epochs, etth1.compare_variants.h192[1]) == (1, 10, "model.num_heads=8")
    assert compose(["experiment=tslib", "data=weather", "model.depth=5"]).model.depth == 5
    assert "per_data" not in weather  # composed away: not a key of the run's config, nor of its hash
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "probe.yaml").write_text(
        "defaults:\n  modality: timeseries\nper_data:\n  etth3: {model: {depth: 3}}\n"
    )
    monkeypatch.setenv("POSLAB_CONFIG_DIR", str(tmp_path))
    with pytest.raises(ConfigError, match=r"per_data.etth3' expects one of 'taylor', 'etth1'.*did you mean 'etth"):
        compose(["experiment=probe"])


def steps_modalities() -> str:
    """The modalities whose data provides steps, as the fit errors list them."""
    from poslab.config.files import modality_positions

    return ", ".join(m for m in available_modalities() if "steps" in modality_positions(m))


def test_an_experiment_tunes_one_encoder_with_encoder_options():
    """``encoder_options: {fire: {threshold: 32.0}}``: that encoder's options for the experiment, below the
    command line; the other encoders (and their runs' hashes) untouched; typos caught whichever encoder runs."""
    from poslab.run.policy import config_hash

    experiment = ["modality=text", "experiment=alibi_extrapolation"]
    assert compose([*experiment, "encoder=fire"]).encoder.threshold == 32.0  # half the context of 64
    assert compose([*experiment, "encoder=xpos"]).encoder.scale_base == 32.0
    assert compose([*experiment, "encoder=fire", "encoder.threshold=16"]).encoder.threshold == 16.0
    assert compose(["modality=text", "encoder=fire"]).encoder.threshold == 512.0  # the constructor's default
    both = compose(["modality=text", "encoder=rope+alibi", "encoder_options={rope:{base:500.0}}"])
    assert both.encoder.rope.base == 500.0  # a composite's member, under its block
    rope = [*experiment, "encoder=rope"]
    untuned = compose([*rope, "encoder_options={}"])
    assert config_hash(to_dict(compose(rope))) == config_hash(to_dict(untuned))  # rope's runs keep their names
    for bad, message in [
        ("encoder_options={fier:{threshold:3.0}}", "encoder_options names no encoder 'fier' (did you mean 'fire'?)"),
        ("encoder_options={xpos:{scalebase:3.0}}",
         "unknown config key 'encoder_options.xpos.scalebase' (did you mean 'scale_base'?); xpos's options: base,"),
    ]:  # fmt: skip
        with pytest.raises(ConfigError, match="^" + re.escape(message)):
            compose(["modality=text", "encoder=rope", bad])


def _yaml_nodes_and_schemas():
    """(file, key, node, schema) for every node a YAML sets that a schema declares defaults for."""
    from poslab.run.trainer_options import trainer_schema
    from poslab.tasks.optimizers import optimizer_schema, sched_schema

    def schemas_for(modality: str) -> dict:
        root = root_schema(get_modality(modality), encoder_schema("none"))
        return {f.name: f.default_factory for f in dataclasses.fields(root) if f.name in GROUPS}

    files = [config_dir() / "train.yaml", *sorted(config_dir().glob("*/*.yaml"))]
    for path in files:
        node = OmegaConf.load(path)
        modality = path.stem if path.parent.name == "modality" else None
        if path.parent.name == "experiment":
            modality = (node.get("defaults") or {}).get("modality")
        groups = schemas_for(modality) if modality in available_modalities() else {}
        if path.parent.name in ("trainer", "logger"):  # a preset is the node itself
            node = OmegaConf.create({path.parent.name: node})
            groups = schemas_for("vision") if path.parent.name == "logger" else {}
        for key, schema in groups.items():
            if key in node:
                yield path, key, node[key], schema
        if "trainer" in node:
            yield path, "trainer", node.trainer, trainer_schema()
        if "optim" in node:
            yield path, "optim", node.optim, optimizer_schema(node.optim.get("name", "adamw"))
        if "sched" in node:
            yield path, "sched", node.sched, sched_schema(node.sched.get("name", "one_cycle"))


#: What a trainer preset sets in full, defaults included: `poslab eval ... trainer=cpu` on a DDP run's checkpoint
#: recomposes the stored config under the preset, which must put strategy and nodes back.
DEVICE_SETTINGS = ("accelerator", "devices", "num_nodes", "strategy", "precision")


def test_no_yaml_restates_a_value_its_code_declares():
    """Code declares, YAML overrides: train.yaml, every modality, trainer and logger preset holds only values
    that differ from the declared default (a constructor's, a dataclass's, Lightning's or torch.optim's)."""
    restated = []
    for path, key, node, schema in _yaml_nodes_and_schemas():
        if path.parent.name == "experiment":
            continue  # an experiment overrides its modality's values: the next test
        found = _restated_defaults(node, schema, f"{key}.")
        if path.parent.name == "trainer":  # a preset states every device setting: it replaces another's
            found = [k for k in found if k.split(".")[-1] not in DEVICE_SETTINGS]
        restated += [f"{path.parent.name}/{path.name}: {k}" for k in found if not k.endswith(".name")]
    assert not restated, restated


def _leaves(node, prefix=""):
    for key, value in node.items():
        if isinstance(value, dict):
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


@pytest.mark.parametrize("path", sorted((config_dir() / "experiment").glob("*.yaml")), ids=lambda p: p.stem)
def test_an_experiment_sets_only_values_that_differ_from_its_modalitys(path):
    raw = OmegaConf.to_container(OmegaConf.load(path))
    selected = raw.get("defaults") or {}
    base = compose([f"{group}={choice}" for group, choice in selected.items() if group != "experiment"])
    plain = OmegaConf.to_container(base, resolve=True)
    same = []
    for group in ("task", "data", "eval", "model", "optim", "sched", "trainer"):
        for key, value in _leaves(raw.get(group) or {}, f"{group}."):
            held = OmegaConf.select(OmegaConf.create(plain), key, default="<unset>")
            held = OmegaConf.to_container(held) if OmegaConf.is_config(held) else held
            if held == value:
                same.append(key)
    assert not same, f"{path.name} repeats what its modality already sets: {same}"


def test_a_device_preset_over_a_stored_ddp_config_puts_strategy_and_nodes_back():
    """`poslab eval ckpt=<a DDP run's> trainer=cpu` evaluates in this process: not as DDP over 2 nodes."""
    stored = to_dict(compose(["trainer=ddp", "trainer.num_nodes=2", "trainer.devices=2"]))
    again = recompose(stored, ["trainer=cpu"])
    assert (again.trainer.strategy, again.trainer.num_nodes, again.trainer.devices) == ("auto", 1, 1)
