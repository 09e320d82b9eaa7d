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


def test_the_registries_import_only_leaves_and_each_other():
    """The encoder and modality registries (and the config files and options they read) import nothing that joins
    them: no composition, no run, no plugin."""
    edges = graph()
    for low in ("poslab.modalities.registry", "poslab.encoders.registry", "poslab.config.files",
                "poslab.positions.offsets", "poslab.config.options"):  # fmt: skip
        assert all(floor_of(t) <= 1 for t in edges[low]), (low, {t for t in edges[low] if floor_of(t) > 1})


# -- function-local imports defer a heavy library, or are kept for a stated reason ---------------------------------
#: Libraries slow enough to import that a module loads them only where it needs them (torch alone takes about a
#: second on a 2-core CPU; `poslab train --print-config` loads neither torch's Lightning nor W&B).
HEAVY = {"torch", "torchvision", "torchmetrics", "lightning", "wandb", "wandb_workspaces", "matplotlib", "pandas",
         "numpy", "rich", "omegaconf", "yaml", "litdata", "pyarrow", "datasets"}  # fmt: skip
#: Modules whose function-local imports all stay, and why.
LOCAL_FOR_A_REASON = {
    "poslab.tools.gpu_check": "it runs on a bare GPU machine and reports each missing package instead of failing",
}
#: Imports that stay local wherever they are, and why.
ALWAYS_LOCAL = {
    "fcntl": "POSIX only: a module importing it at the top could not be imported elsewhere",
    "av": "only where a run reads video files: a GPU check's machine, which has no PyAV, imports the video modality",
}


def _imported(node: ast.AST, known: set[str]) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom) and node.module and not node.level:
        return [node.module, *(f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in known)]
    return []


def needless_local_imports(sources: dict[str, str]) -> list[tuple[str, int, str]]:
    """``(module, line, imported)`` for each import inside a function of ``sources`` (module name -> code) that
    loads no :data:`HEAVY` library the module's own top-level imports (followed through poslab's modules) do not
    load already: it defers nothing, so it belongs at the top."""
    trees = {name: ast.parse(code) for name, code in sources.items()}

    def top_level(name: str) -> list[str]:
        parents = [".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)]
        found = [n for node in trees[name].body for n in _imported(node, set(trees))]
        return [*parents, *found]

    libraries: dict[str, set[str]] = {}

    def loads(name: str) -> set[str]:
        """The libraries importing ``name`` loads (a poslab module: through its top-level imports)."""
        if name not in trees:
            return {name.split(".")[0]} - {"poslab"}
        if name not in libraries:
            libraries[name] = set()  # a module being walked counts as loading nothing more
            libraries[name] = set().union(*(loads(n) for n in top_level(name) if n != name))
        return libraries[name]

    needless = []
    for name, tree in trees.items():
        if name in LOCAL_FOR_A_REASON:
            continue
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                targets = _imported(node, set(trees))
                if not targets or targets[0].split(".")[0] in ALWAYS_LOCAL:
                    continue
                if not (set().union(*(loads(t) for t in targets)) - loads(name)) & HEAVY:
                    needless.append((name, node.lineno, targets[0]))
    return needless


def test_function_local_imports_only_defer_a_heavy_library():
    sources = {name: path.read_text(encoding="utf-8") for name, path in MODULES.items()}
    assert needless_local_imports(sources) == []


def test_the_local_import_check_finds_one_that_defers_nothing():
    sources = {
        "poslab.light": "import json\n\ndef f():\n    import re\n    from poslab.heavy import g\n    import torch\n",
        "poslab.heavy": "import torch\n\ndef g():\n    from poslab.light import f\n",
    }
    # re is no library to defer, and torch is what the heavy module has at its top: both local imports are needless
    assert needless_local_imports(sources) == [("poslab.light", 4, "re"), ("poslab.heavy", 4, "poslab.light")]


# -- floors: each module on one, imports going down (or across) only ------------------------------------------------
#: The floors of the house, bottom first: (name, modules). ``pkg.*`` is a package and everything in it, ``pkg.+``
#: everything in it but its face (``poslab.modalities.+``: the plugins); any other entry is one module. The most
#: specific entry wins, so a folder's leaves can stand below the rest of it.
FLOORS = [
    ("leaves", ["poslab", "poslab.moved", "poslab.errors", "poslab.files", "poslab.interrupts", "poslab.entry_points",
                "poslab.positions.*", "poslab.config", "poslab.config.ranges", "poslab.config.options",
                "poslab.config.checks", "poslab.config.schema", "poslab.config.files", "poslab.run",
                "poslab.run.policy", "poslab.run.locks", "poslab.run.cluster", "poslab.run.denormals",
                "poslab.run.trainer_arguments", "poslab.nn.precision", "poslab.track", "poslab.track.plots",
                "poslab.track.tables", "poslab.study", "poslab.study.expectations", "poslab.tools",
                "poslab.encoders.longrope_search"]),
    # the protocol, the combinations of encoders the registry builds, the two registries
    ("registries", ["poslab.encoders.base", "poslab.encoders.composite", "poslab.encoders.layered",
                    "poslab.encoders.registry", "poslab.modalities", "poslab.modalities.registry"]),
    # the parts, and the options declared where they are used
    ("parts", ["poslab.encoders.*", "poslab.nn.*", "poslab.data.*", "poslab.evaluation.*", "poslab.track.*",
               "poslab.tasks.optimizers", "poslab.run.trainer_options", "poslab.run.presets", "poslab.run.rundir",
               "poslab.run.memory"]),
    ("config", ["poslab.config.root", "poslab.config.validation", "poslab.config.composition", "poslab.run.resume"]),
    ("runs", ["poslab.tasks.*", "poslab.run.*", "poslab.study.report", "poslab.study.report_figures",
              "poslab.tools.show", "poslab.modalities.+"]),
    ("commands", ["poslab.study.*", "poslab.tools.*", "poslab.cli.*", "poslab.__main__"]),
]  # fmt: skip
#: Imports from a lower floor up to a higher one that stay, and why (at most two). Modality and dataset plugins
#: are found at run time (``importlib``, entry points), not imported: the registries name none of them.
UPWARD: dict[tuple[str, str], str] = {}


def floor_of(module: str) -> int | None:
    """The floor of the most specific entry naming ``module`` (an exact name beats a package's pattern)."""
    best = None
    for number, (_, entries) in enumerate(FLOORS):
        for entry in entries:
            package = entry[:-2] if entry.endswith((".*", ".+")) else None
            if package is None:
                inside, weight = module == entry, len(entry) + 1
            else:
                below = module.startswith(f"{package}.")
                inside, weight = below or (entry.endswith(".*") and module == package), len(package)
            if inside and (best is None or weight > best[1]):
                best = (number, weight)
    return None if best is None else best[0]


def upward(edges: dict[str, set[str]]) -> set[tuple[str, str]]:
    return {(a, b) for a, targets in edges.items() for b in targets if floor_of(a) < floor_of(b)}


def test_every_module_is_on_a_floor_and_imports_go_down():
    edges = graph()
    assert not [m for m in edges if floor_of(m) is None], "a module on no floor: add it to FLOORS"
    named = [entry.removesuffix(".*").removesuffix(".+") for _, entries in FLOORS for entry in entries]
    assert not [n for n in named if n not in edges], "FLOORS names a module that is gone"
    assert len(UPWARD) <= 2 and upward(edges) <= set(UPWARD), sorted(upward(edges) - set(UPWARD))


def test_the_floor_check_finds_an_import_going_up():
    edges = {**graph(), "poslab.errors": {"poslab.run.train"}}
    assert ("poslab.errors", "poslab.run.train") in upward(edges)


def test_the_config_layer_stays_small():
    """Composing and checking a config (``config/``) fits in 800 lines: an option is declared where it is used,
    and the config layer only joins and checks the declarations."""
    lines = sum(len(p.read_text(encoding="utf-8").splitlines()) for p in (PACKAGE / "config").glob("*.py"))
    assert lines <= 800, lines


def unexplained_local_imports(sources: dict[str, str]) -> list[tuple[str, int]]:
    """``(module, line)`` of each import inside a function of ``sources`` with no comment beside it saying why
    it is deferred (a module of :data:`LOCAL_FOR_A_REASON` says it once)."""
    found = []
    for name, code in sources.items():
        if name in LOCAL_FOR_A_REASON:
            continue
        lines = code.splitlines()
        for function in ast.walk(ast.parse(code)):
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(function):
                    if isinstance(node, (ast.Import, ast.ImportFrom)) and "#" not in lines[node.end_lineno - 1]:
                        found.append((name, node.lineno))
    return found


def test_every_function_local_import_says_why():
    sources = {name: path.read_text(encoding="utf-8") for name, path in MODULES.items()}
    assert unexplained_local_imports(sources) == []
    planted = {"poslab.x": "def f():\n    import torch\n    import wandb  # deferred: W&B, ~0.8 s\n"}
    assert unexplained_local_imports(planted) == [("poslab.x", 2)]
