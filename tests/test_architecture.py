"""The house has no import loop: every import of poslab's modules (function-local ones too) is walked, and no
set of files imports itself round a circle; the backbone reads the encoder protocol only."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "poslab"


def module_of(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_of(p): p for p in PACKAGE.rglob("*.py")}


def imports(path: Path) -> set[str]:
    """The poslab modules ``path`` imports anywhere in it (``from pkg import sub`` counts ``pkg.sub``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("poslab")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("poslab") and not node.level:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in MODULES}
    return {m for m in found if m in MODULES}


def graph() -> dict[str, set[str]]:
    return {name: imports(path) - {name} for name, path in MODULES.items()}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected sets of more than one module (Tarjan 1972)."""
    index, low, stack, on_stack, out, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_poslab_has_no_import_cycle():
    assert circles(graph()) == []


def test_the_cycle_check_finds_one():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_backbone_reads_only_the_encoder_protocol():
    for name, targets in graph().items():
        if name.startswith("poslab.nn"):
            from_encoders = {t for t in targets if t.startswith("poslab.encoders")}
            assert from_encoders <= {"poslab.encoders.base"}, (name, from_encoders)


def test_the_registries_are_leaves():
    """The encoder and modality registries and the config files import nothing that joins them."""
    edges = graph()
    for leaf in ("poslab.plugins", "poslab.config_files", "poslab.offsets", "poslab.options"):
        assert not {t for t in edges[leaf] if t.startswith(("poslab.config", "poslab.modalities", "poslab.train"))
                    and t != "poslab.config_files"}, leaf  # fmt: skip
