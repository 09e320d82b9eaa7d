"""``poslab new encoder NAME --hook HOOK``: the files a new encoder needs, as stubs to fill in.

Writes ``src/poslab/encoders/<name>.py`` (the class with the hook to write and
a docstring asking for its paper and equation), ``configs/encoder/<name>.yaml``
and ``tests/encoders/test_<name>.py`` (a golden-value test that fails until
the paper's values are written into it). The registry, the config validation
and the parametrized tests pick the encoder up with no other edit; until its
hook is written they fail on it, naming it. Nothing is overwritten.
"""

from __future__ import annotations

import keyword
import re
import sys
from pathlib import Path

#: hook -> (the method to write, its signature, what it returns)
HOOKS = {
    "encode_input": ("encode_input(self, x, pos)", "x + the position embedding, ``[B, L, D]``"),
    "rotate": ("rotate(self, x, pos)", "per-head queries or keys rotated by position, ``[B, H, L, Dh]``"),
    "attention_bias": ("attention_bias(self, q_pos, k_pos)", "an additive logits bias ``[H, Lq, Lk]``"),
    "relative_bias": ("relative_bias(self, offsets)", "the bias of each offset k − q, ``[H, *offsets.shape]``"),
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
    reads = "{reads}"  # the Positions field it uses: it fits every modality whose data provides it

    def __init__(self, dim: int, num_heads: int) -> None:  # options: typed keyword arguments with defaults
        super().__init__(dim, num_heads)

    def {signature_line}:
        """Returns {returns}."""
        {field_line}
        raise NotImplementedError("{name}: write the {hook} hook (README, 'Add an encoder')")
'''

CONFIG = """# {name}: <what it is> (<paper>). Every constructor option with its default.
name: {name}
"""

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


def class_name(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_")) or "Encoder"


def new_encoder(name: str, hook: str, reads: str = "steps", root: Path | str = ".") -> list[Path]:
    """Write the three files for encoder ``name`` under ``root``; a one-line error for a bad name, an unknown
    hook or field, or a file that exists already (nothing is written then)."""
    from poslab.encoders import available_encoders
    from poslab.errors import ConfigError
    from poslab.positions import POSITION_FIELDS

    if not re.fullmatch(r"[a-z][a-z0-9_]*", name) or keyword.iskeyword(name):
        raise ConfigError(f"encoder name '{name}': lower-case letters, digits and _ , starting with a letter")
    if name in available_encoders():
        raise ConfigError(f"encoder '{name}' exists already; pick another name")
    if hook not in HOOKS:
        raise ConfigError(f"unknown hook '{hook}'; valid: {', '.join(HOOKS)}")
    if reads not in POSITION_FIELDS:
        raise ConfigError(f"unknown positions field '{reads}'; valid: {', '.join(POSITION_FIELDS)}")
    root = Path(root)
    files = {
        root / "src" / "poslab" / "encoders" / f"{name}.py": _encoder(name, hook, reads),
        root / "configs" / "encoder" / f"{name}.yaml": CONFIG.format(name=name),
        root / "tests" / "encoders" / f"test_{name}.py": TEST.format(name=name),
    }
    taken = [str(p) for p in files if p.exists()]
    if taken:
        raise ConfigError(f"{taken[0]} exists already; nothing written")
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return list(files)


def _encoder(name: str, hook: str, reads: str) -> str:
    signature, returns = HOOKS[hook]
    field_line = {  # the hook's first line: the positions it reads (offsets are already a tensor)
        "encode_input": f"positions = self.field(pos)  # the tensor of positions.{reads}",
        "rotate": f"positions = self.field(pos)  # the tensor of positions.{reads}",
        "attention_bias": f"positions = self.field(q_pos)  # the tensor of positions.{reads}",
        "relative_bias": "# offsets: k − q, float, any shape",
    }[hook]
    return ENCODER.format(
        name=name, cls=class_name(name), reads=reads, hook=hook, signature_line=signature, returns=returns,
        field_line=field_line,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    import argparse

    from poslab.errors import PoslabError

    parser = argparse.ArgumentParser(prog="poslab new", description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=["encoder"], help="what to create")
    parser.add_argument("name", help="the encoder's registered name, e.g. kerple")
    parser.add_argument("--hook", required=True, choices=list(HOOKS), help="the hook it overrides")
    parser.add_argument("--reads", default="steps", help="the Positions field it reads (default: steps)")
    parser.add_argument("--root", type=Path, default=Path("."), help="the repository root (default: .)")
    args = parser.parse_args(argv)
    try:
        written = new_encoder(args.name, args.hook, args.reads, args.root)
    except PoslabError as exc:
        print(f"poslab new: error: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path}")
    print(f"next: write the hook and its golden test, then `make test` (poslab list shows '{args.name}')")
    return 0
