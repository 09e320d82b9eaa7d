"""``poslab new encoder|dataset|modality``: the files a new encoder, dataset or modality needs.

``new encoder NAME --hook HOOK`` writes ``src/poslab/encoders/<name>.py`` (the
class with the hook to write and a docstring asking for its paper and
equation; its options are its constructor's keyword arguments, so it needs no
YAML) and ``tests/encoders/test_<name>.py`` (a golden-value test that fails
until the paper's values are written into it).

``new dataset NAME --modality MODALITY`` writes
``src/poslab/modalities/<modality>/sources/<name>.py`` (the loader and the
writer of a tiny sample of its files) and ``tests/data/test_<name>.py`` (a
known-values test that fails until written).

``new modality NAME`` copies the smallest working modality
(:mod:`poslab.tools.scaffolds.modality`: generated data, a model, a task, its record)
into ``src/poslab/modalities/<name>/``, with ``configs/modality/<name>.yaml``
and ``tests/test_<name>_modality.py``; it trains as written, and is changed
from there.

The registries, the config validation and the parametrized tests pick each
up with no other edit; until the encoder and dataset stubs are written they
fail on them, naming them. Nothing is overwritten.
"""

from __future__ import annotations

import argparse
import keyword
import re
import sys
from importlib import resources
from pathlib import Path

from poslab.data.sources import source_modules
from poslab.errors import ConfigError, PoslabError
from poslab.modalities.registry import available_modalities

#: hook -> (the method to write, its signature, what it returns)
HOOKS = {
    "encode_input": ("encode_input(self, x, pos)", "x + the position embedding, ``[B, L, D]``"),
    "rotate": ("rotate(self, x, pos)", "per-head queries or keys rotated by position, ``[B, H, L, Dh]``"),
    "attention_bias": ("attention_bias(self, q_pos, k_pos)", "an additive logits bias ``[H, Lq, Lk]``"),
    "relative_bias": ("relative_bias(self, offsets)", "the bias of each offset k − q, ``[H, *offsets.shape]``"),
    "content_bias": ("content_bias(self, q, k, logits)", "an additive bias from the content, ``[B, H, Lq, Lk]``"),
    "input_bias": ("input_bias(self, x, layer)", "an additive bias from the layer's input tokens, ``[B, H, L, L]``"),
    "attention_logits": (
        "attention_logits(self, q, k, x, layer)",
        "the logits in place of q·k/√Dh, ``[B, H, Lq, Lk]``",
    ),
    "attention_weights": ("attention_weights(self, logits)", "the weights in place of the softmax, ``[B, H, Lq, Lk]``"),
}

ENCODER = '''"""``{name}``: <what it is, in one line>.

<Authors year, "Title">, <section / equation>: <the formula this file implements>.
"""

from __future__ import annotations

import torch

from poslab.encoders.base import PositionEncoder
from poslab.encoders.registry import register_encoder


@register_encoder("{name}")
class {cls}(PositionEncoder):
    paper = "<Authors year>"  # the paper it implements (the docs' encoder table)
    reads = "{reads}"  # the Positions field it uses: it fits every modality whose data provides it

    def __init__(self, dim: int, num_heads: int) -> None:  # options: typed keyword arguments with defaults
        super().__init__(dim, num_heads)

    def {signature_line}:
        """Returns {returns}."""
        {field_line}
        raise NotImplementedError("{name}: write the {hook} hook (docs/extending.md, 'Add an encoder')")
'''

TEST = '''"""``{name}`` against its paper: values written out from the paper's equation, not computed by the encoder."""

from __future__ import annotations

import torch

from poslab.encoders import build_encoder


def test_{name}_golden_values():
    enc = build_encoder("{name}", dim=8, num_heads=2)
    golden = None  # the paper's values for a small case, written out by hand (or by an independent formula)
    assert golden is not None, "{name}: write the golden values from the paper into this test"
    torch.testing.assert_close(enc, golden)  # replace with the hook's output for that case
'''


DATASET = '''"""``{name}`` ({modality} data): <what it holds, who made it, its licence, the paper to cite>.

Split: <how train / validation / test are cut, and why (the dataset's own convention if it has one)>.
"""

from __future__ import annotations

from pathlib import Path

from poslab.data.downloads import fetch
from poslab.modalities.{modality}.sources import SAMPLES, SOURCES, {imports}

#: Where the file lives and its SHA-256: fetch() downloads it into data.root atomically and checks it.
URL = ("https://<where the file lives>", "<its sha256>")


def load_{name}(root: Path, download: bool, path: str | None = None) -> {result}:
    """Returns {returns}."""
    # file = fetch(URL[0], Path(root) / "<file name>", URL[1], download)
    raise NotImplementedError("{name}: write load_{name} (docs/extending.md, 'Add a dataset')")


def sample_{name}(root: Path) -> list[str]:
    """Writes a tiny copy of the files load_{name} reads into ``root`` (every test runs the loader on it, never
    the network); returns the config overrides that read it, e.g. ``["data.path=…"]``, often none."""
    raise NotImplementedError("{name}: write sample_{name} (docs/extending.md, 'Add a dataset')")


{register}
SAMPLES["{name}"] = sample_{name}
'''

DATASET_TEST = '''"""``{name}``: what its loader must get right, on files the test writes (never the network)."""

from __future__ import annotations

from poslab.modalities.{modality}.sources import SAMPLES, SOURCES


def test_{name}_reads_the_values_its_file_holds(tmp_path, accept_any_checksum):
    SAMPLES["{name}"](tmp_path)
    source = SOURCES["{name}"]
    loaded = getattr(source, "load", source)(tmp_path, download=False)
    golden = None  # values the file is known to hold: a first row, the split sizes, a checksum's refusal…
    assert golden is not None, "{name}: write the values the loader must return into this test"
    assert loaded == golden  # replace with the comparison that fits what the loader returns
'''


def new_dataset(name: str, modality: str, root: Path | str = ".") -> list[Path]:
    """Write the two files for data source ``name`` of ``modality`` under ``root``; a one-line error for a bad
    name, a modality without data sources or a name taken (nothing is written then)."""

    _check_name(name, "dataset")
    packages = source_modules()
    if modality not in packages:
        raise ConfigError(f"modality '{modality}' reads no datasets; valid: {', '.join(packages)}")
    package = packages[modality]
    if name in package.SOURCES:
        raise ConfigError(f"{modality} dataset '{name}' exists already; pick another name")
    imports = package.STUB_IMPORTS
    stub = DATASET.format(
        name=name, modality=modality, imports=imports, result=imports.split(",")[0], returns=package.RETURNS,
        register=package.REGISTER.format(name=name),
    )  # fmt: skip
    root = Path(root)
    return _write(
        {
            root / "src" / "poslab" / "modalities" / modality / "sources" / f"{name}.py": stub,
            root / "tests" / "data" / f"test_{name}.py": DATASET_TEST.format(name=name, modality=modality),
        }
    )


def _check_name(name: str, kind: str) -> None:

    if not re.fullmatch(r"[a-z][a-z0-9_]*", name) or keyword.iskeyword(name):
        raise ConfigError(f"{kind} name '{name}': lower-case letters, digits and _ , starting with a letter")


def _write(files: dict[Path, str]) -> list[Path]:
    """Every file or none: a name that exists already stops before anything is written."""

    taken = [str(p) for p in files if p.exists()]
    if taken:
        raise ConfigError(f"{taken[0]} exists already; nothing written")
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return list(files)


def class_name(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_")) or "Encoder"


def new_encoder(name: str, hook: str, reads: str = "steps", root: Path | str = ".") -> list[Path]:
    """Write the three files for encoder ``name`` under ``root``; a one-line error for a bad name, an unknown
    hook or field, or a file that exists already (nothing is written then)."""
    from poslab.encoders import available_encoders  # deferred: torch, ~2.6 s
    from poslab.positions import POSITION_FIELDS  # deferred: torch, ~2.3 s

    _check_name(name, "encoder")
    if name in available_encoders():
        raise ConfigError(f"encoder '{name}' exists already; pick another name")
    if hook not in HOOKS:
        raise ConfigError(f"unknown hook '{hook}'; valid: {', '.join(HOOKS)}")
    if reads not in POSITION_FIELDS:
        raise ConfigError(f"unknown positions field '{reads}'; valid: {', '.join(POSITION_FIELDS)}")
    root = Path(root)
    files = {
        root / "src" / "poslab" / "encoders" / f"{name}.py": _encoder(name, hook, reads),
        root / "tests" / "encoders" / f"test_{name}.py": TEST.format(name=name),
    }
    return _write(files)


def _encoder(name: str, hook: str, reads: str) -> str:
    signature, returns = HOOKS[hook]
    field_line = {  # the hook's first line: the positions it reads (offsets are already a tensor)
        "encode_input": f"positions = self.field(pos)  # the tensor of positions.{reads}",
        "rotate": f"positions = self.field(pos)  # the tensor of positions.{reads}",
        "attention_bias": f"positions = self.field(q_pos)  # the tensor of positions.{reads}",
        "relative_bias": "# offsets: k − q, float, any shape",
        "content_bias": "# q, k: [B, H, L, Dh] after rotation; logits: [B, H, Lq, Lk], masked keys at −inf",
        "input_bias": "# x: [B, L, D], the normed input of layer `layer` (from 0)",
        "attention_logits": "# q, k: [B, H, L, Dh] after rotation; x: [B, L, D], the normed input of layer `layer`",
        "attention_weights": "# logits: [B, H, Lq, Lk], scaled, biased, masked keys at −inf",
    }[hook]
    return ENCODER.format(
        name=name, cls=class_name(name), reads=reads, hook=hook, signature_line=signature, returns=returns,
        field_line=field_line,
    )  # fmt: skip


#: The modality template's files and where a checkout keeps each copy (``{name}``: the new modality's name).
MODALITY_FILES = {
    "schema.py": "src/poslab/modalities/{name}/schema.py",
    "data.py": "src/poslab/modalities/{name}/data.py",
    "model.py": "src/poslab/modalities/{name}/model.py",
    "task.py": "src/poslab/modalities/{name}/task.py",
    "record.py": "src/poslab/modalities/{name}/record.py",
    "toy.yaml": "configs/modality/{name}.yaml",
    "test_toy.py": "tests/test_{name}_modality.py",
}

MODALITY_INIT = '''"""``{name}``: <what this modality trains on and which position question it asks, in one line>.

Started from ``poslab new modality`` (the template's task: is the first digit larger than the last).
Files: ``schema.py`` (its config keys), ``data.py`` (the data module and its positions), ``model.py`` (the
network around poslab's backbone), ``task.py`` (loss and metrics), ``record.py`` (what it contributes).
"""

from poslab.modalities import register_modality
from poslab.modalities.{name}.record import MODALITY

register_modality(MODALITY)
'''


def new_modality(name: str, root: Path | str = ".", grid: bool = False) -> list[Path]:
    """Write a working modality ``name`` under ``root`` from the template — a sequence of tokens at steps, or
    with ``grid`` a 2D grid of cells at (row, col) — a one-line error for a bad name, a modality that exists or
    a file that does (nothing is written then)."""

    _check_name(name, "modality")
    if name in available_modalities():
        raise ConfigError(f"modality '{name}' exists already; pick another name")
    template = resources.files("poslab.tools.scaffolds.modality")
    on_grid = resources.files("poslab.tools.scaffolds.modality_grid")  # the files a grid modality changes
    root = Path(root)
    files = {root / "src" / "poslab" / "modalities" / name / "__init__.py": MODALITY_INIT.format(name=name)}
    for source, target in MODALITY_FILES.items():
        chosen = on_grid if grid and on_grid.joinpath(source).is_file() else template
        files[root / target.format(name=name)] = renamed(chosen.joinpath(source).read_text(), name)
    return _write(files)


def renamed(text: str, name: str) -> str:
    """The template's text for modality ``name``: the word ``toy`` and the ``Toy`` of its class names."""
    return re.sub(r"\bToy(?=[A-Z]|\b)", class_name(name), re.sub(r"\btoy\b", name, text))


def main(argv: list[str] | None = None) -> int:

    parser = argparse.ArgumentParser(prog="poslab new", description=__doc__.splitlines()[0])
    kinds = parser.add_subparsers(dest="kind", required=True, metavar="{encoder,dataset,modality}")
    encoder = kinds.add_parser("encoder", help="an encoder: NAME --hook HOOK [--reads FIELD]")
    encoder.add_argument("name", help="the encoder's registered name, e.g. kerple")
    encoder.add_argument("--hook", required=True, choices=list(HOOKS), help="the hook it overrides")
    encoder.add_argument("--reads", default="steps", help="the Positions field it reads (default: steps)")
    dataset = kinds.add_parser("dataset", help="a data source: NAME --modality MODALITY")
    dataset.add_argument("name", help="its data.name, e.g. sonnets")
    dataset.add_argument("--modality", required=True, help="the modality whose data it is")
    modality = kinds.add_parser("modality", help="a modality, from the smallest working one: NAME [--grid]")
    modality.add_argument("name", help="its modality= name, e.g. audio")
    modality.add_argument("--grid", action="store_true", help="tokens on a 2D grid at (row, col), not a sequence")
    for sub in (encoder, dataset, modality):
        sub.add_argument("--root", type=Path, default=Path("."), help="the repository root (default: .)")
    args = parser.parse_args(argv)
    if not (args.root / "src" / "poslab" / "encoders").is_dir():
        print(
            f"poslab new: error: {args.root.resolve()} is not a poslab checkout (no src/poslab/encoders/): poslab new "
            "writes into a fork; outside one, add an encoder, a modality or a dataset as a plugin package "
            "(entry points, docs/extending.md)",
            file=sys.stderr,
        )
        return 2
    try:
        if args.kind == "encoder":
            written = new_encoder(args.name, args.hook, args.reads, args.root)
            after = f"write the hook and its golden test, then `make test` (poslab list shows '{args.name}')"
        elif args.kind == "dataset":
            written = new_dataset(args.name, args.modality, args.root)
            after = f"write the loader, its sample and its test, then `make test` (data={args.name} trains on it)"
        else:
            written = new_modality(args.name, args.root, grid=args.grid)
            after = (
                f"`poslab train modality={args.name}` trains the template's task; replace its data, model and "
                f"task, then `make test` (docs/extending.md, 'Add a modality')"
            )
    except PoslabError as exc:
        print(f"poslab new: error: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path}")
    print(f"next: {after}")
    return 0
