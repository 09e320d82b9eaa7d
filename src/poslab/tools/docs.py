"""The tables the docs carry, generated from the code and the configs (``make docs``), never copied by hand.

A docs page holds a generated block between two markers, ``<!-- poslab-docs:NAME -->`` and
``<!-- /poslab-docs:NAME -->``; :func:`render` rewrites what lies between them and leaves the rest of
the page as written. The docs describe the project: what an installed plugin adds (its encoders, its
modalities, its configs) is left to the plugin's own docs, so installing one leaves the pages as they are.
The blocks:

* ``encoders`` — every registered encoder: its paper, the hooks it overrides, the position field it
  reads, the modalities it fits, its defaults and the verdicts of the experiments that test it;
* ``options:<modality>`` — every task, data, model and evaluation option of a modality, its type and
  the modality's value;
* ``experiments`` — every experiment: modality, encoders, what it expects and whether it held.

Verdicts are the one input that is not code: ``docs/verdicts.json``, refreshed by ``make docs`` from
the runs it finds in the run root whose config is an experiment's grid as the configs compose it now
(an experiment without such runs keeps its recorded verdicts). A test regenerates every block and
fails when a committed page differs, so a new encoder, option or experiment lands with its row.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from poslab.config.composition import compose, to_dict
from poslab.config.files import config_dirs, load_yaml, modality_positions
from poslab.config.validation import validate
from poslab.encoders import available_encoders, encoder_class, encoder_defaults
from poslab.encoders.base import PositionEncoder
from poslab.entry_points import entry_points, plugin_config_dirs, plugin_packages
from poslab.errors import ConfigError
from poslab.modalities.registry import available_modalities
from poslab.run.policy import config_hash
from poslab.study.compare import plan
from poslab.study.report import check_expectations, group_runs
from poslab.tools.options import option_rows
from poslab.track.summary import read_summary
from poslab.track.tables import markdown_table

MARKER = re.compile(r"(<!-- poslab-docs:(?P<name>[\w:.-]+) -->\n)(?P<body>.*?)(<!-- /poslab-docs:(?P=name) -->)", re.S)
VERDICTS = "verdicts.json"
#: The option groups a modality's table lists (the encoder's are in the encoder table; the trainer's are
#: Lightning's own arguments).
MODALITY_GROUPS = ("task.", "data.", "model.", "eval.")


def cell(value: Any) -> str:
    """A value as a Markdown table cell: code-formatted, pipes escaped."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return "`" + text.replace("|", "\\|") + "`"


def table(header: list[str], rows: list[list[str]]) -> str:
    return "\n".join(markdown_table(header, rows)) + "\n"


# -- experiments and their verdicts -----------------------------------------------------------------------


def own_config_dirs() -> list[Path]:
    """The config folders less the installed plugins' (first wins, as :func:`config_dirs`)."""
    plugins = set(plugin_config_dirs())
    return [d for d in config_dirs() if d not in plugins]


def own_encoders() -> list[str]:
    """The registered encoders less those an installed plugin's package defines."""
    plugins = plugin_packages()
    return [n for n in available_encoders() if encoder_class(n).__module__.split(".")[0] not in plugins]


def own_modalities() -> list[str]:
    """The registered modalities less those an installed plugin's entry points add."""
    plugins = {ep.name for ep in entry_points("poslab.modalities")}
    return [m for m in available_modalities() if m not in plugins]


#: A sentence ends at a full stop before a capital, not after an abbreviation ("Sun et al. (2023)").
SENTENCE_END = re.compile(r"(?<!\bal)(?<!\be\.g)(?<!\bi\.e)(?<!\bcf)(?<!\bvs)(?<!\bsec)(?<!\beq)\.\s+(?=[A-Z`*])")


def first_sentence(text: str) -> str:
    return SENTENCE_END.split(text, maxsplit=1)[0].rstrip(".") + "."


def experiments() -> dict[str, dict[str, Any]]:
    """name -> {modality, encoders, expect, about} for every experiment YAML, as it is written."""
    found: dict[str, dict[str, Any]] = {}
    for root in reversed(own_config_dirs()):  # the project's own last: it wins a clash
        for path in sorted((root / "experiment").glob("*.yaml")):
            raw = OmegaConf.to_container(OmegaConf.load(path)) or {}
            comment = []
            for line in path.read_text(encoding="utf-8").splitlines():
                if not line.startswith("#"):
                    break
                comment.append(line.lstrip("# ").rstrip())
            about = first_sentence(" ".join(comment)) if comment else ""
            found[path.stem] = {
                "modality": (raw.get("defaults") or {}).get("modality", ""),
                "encoders": list(raw.get("compare_encoders") or []),
                "variants": list(raw.get("compare_variants") or {}),
                "expect": list(raw.get("expect") or []),
                "about": about,
            }
    return dict(sorted(found.items()))


def read_verdicts(docs_dir: Path) -> dict[str, Any]:
    path = docs_dir / VERDICTS
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def computed_hash(stored: dict) -> str:
    """What a stored run computes, as a hash: its config with the keys added since it ran at their defaults
    (a key's default is what the run computed before the key existed), as it stands when that config no longer
    validates."""
    try:
        stored = to_dict(validate(OmegaConf.create(stored)))
    except ConfigError:
        pass
    return config_hash(stored, ignore=("run",))


def comparison_ids(summary: dict) -> list[str]:
    """The comparisons (``compare:<id>`` tags) a run was trained in; none for a run trained on its own."""
    tags = (summary.get("config") or {}).get("logger", {}).get("tags") or []
    return [t.removeprefix("compare:") for t in tags if str(t).startswith("compare:")]


def measured_verdicts(
    name: str, modality: str, expect: list[str], echo: Callable[[str], None] = print
) -> dict[str, Any] | None:
    """The experiment's expectations (as its YAML states them now) checked on its grid's runs under the run
    root, or None when a run of the grid (as the configs compose it now) is missing. Only runs a comparison
    trained count (a run trained on its own, one seed of a setting, does not), and the verdict names the
    comparisons it took. A run counts by what it computes (its config's hash), not by its folder's name: one
    made with ``data.root=../shared/data``, or before a YAML stopped restating a default, is the same run."""
    grid = plan(modality, None, None, [f"experiment={name}"])
    finished: dict[str, dict] = {}
    for path in sorted((Path(grid[0][2].run.root) / modality).glob("*/summary.json")):
        summary = read_summary(path)
        if not comparison_ids(summary):
            continue
        key = computed_hash(summary["config"])
        if str(summary.get("created", "")) >= str(finished.get(key, {}).get("created", "")):
            finished[key] = summary  # the newest of two runs of one config
    summaries = []
    for _label, _seed, cfg in grid:
        found = finished.get(config_hash(to_dict(cfg), ignore=("run",)))
        if found is None:
            return None
        summaries.append(found)
    rows = check_expectations(group_runs(summaries), expect)
    dates = sorted(str(s.get("created", ""))[:10] for s in summaries)
    comparisons = sorted({c for s in summaries for c in comparison_ids(s)[-1:]})  # the one that trained each
    made = [r for r in rows if r[2] is not None]
    echo(f"poslab docs: {name}: {sum(r[2] is True for r in made)} of {len(made)} checks held "
         f"({len(rows) - len(made)} not checked), from the {len(summaries)} runs of comparison(s) "
         f"{', '.join(comparisons)}")  # fmt: skip
    return {
        "measured": dates[-1] if dates else str(date.today()),
        "runs": len(summaries),
        "comparisons": comparisons,
        "expectations": [{"expect": t, "encoder": e, "held": h, "values": v} for t, e, h, v in rows],
    }


def refresh_verdicts(docs_dir: Path, echo: Callable[[str], None] = print) -> dict[str, Any]:
    """``docs/verdicts.json`` with every experiment whose whole grid is in the run root re-checked."""
    verdicts = read_verdicts(docs_dir)
    for name, spec in experiments().items():
        if spec["expect"] and spec["modality"]:
            measured = measured_verdicts(name, spec["modality"], spec["expect"], echo)
            if measured is not None:
                verdicts[name] = measured
    verdicts = {k: verdicts[k] for k in sorted(verdicts)}
    (docs_dir / VERDICTS).write_text(json.dumps(verdicts, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return verdicts


def verdict_mark(held: list[bool | None]) -> str:
    """One expectation over the encoders it names: held by every one, not held by one, or not measured."""
    if held and all(h is True for h in held):
        return "held"
    return "**not held**" if False in held else "—"


# -- the blocks ----------------------------------------------------------------------------------------------


def encoder_block(verdicts: dict[str, Any]) -> str:
    # looked up once: each lookup scans the installed packages for plugins
    positions = {m: (modality_positions(m), modality_positions(m, "offers")) for m in own_modalities()}
    yamls = {p.stem: p for root in reversed(own_config_dirs()) for p in (root / "encoder").glob("*.yaml")}
    rows = []
    for name in own_encoders():
        cls = encoder_class(name)
        hooks = list(cls.hooks())
        if cls.for_layer is not PositionEncoder.for_layer:
            hooks.append("per layer")
        defaults = encoder_defaults(name)
        if name in yamls:  # the YAML's values where it differs from the constructor
            values = OmegaConf.to_container(load_yaml(yamls[name]))
            defaults.update({k: v for k, v in values.items() if k not in ("defaults", "name")})
        shown = ", ".join(f"{k}={json.dumps(v, default=str)}" for k, v in defaults.items() if v is not None)
        fits = [m for m, (fields, offers) in positions.items() if cls.fits(fields, offers)]
        tested = []
        for experiment, record in verdicts.items():
            mine = [e["held"] for e in record.get("expectations", []) if e["encoder"].split("/")[0] == name]
            if mine:
                tested.append(f"`{experiment}` {sum(h is True for h in mine)}/{len(mine)}")
        rows.append(
            [
                f"`{name}`",
                getattr(cls, "paper", "") or "—",
                ", ".join(f"`{h}`" for h in hooks) or "—",
                f"`{cls.reads}`" if cls.reads else "—",
                ", ".join(fits),
                cell(shown) if shown else "—",
                "; ".join(tested) or "—",
            ]
        )
    header = ["encoder", "paper", "hooks", "reads", "fits", "defaults", "experiments: expectations held"]
    return table(header, rows)


def own_choices(kind: str, modality: str) -> str:
    """An option's type less the choices an installed plugin's datasets add (``one of 'a', 'b'``)."""
    sources = [ep.name.split(".", 1) for ep in entry_points("poslab.sources") if "." in ep.name]
    added = {f"'{name}'" for owner, name in sources if owner == modality}
    if not added or not kind.startswith("one of "):
        return kind
    return "one of " + ", ".join(c for c in kind.removeprefix("one of ").split(", ") if c not in added)


def options_block(modality: str) -> str:
    rows = [
        [f"`{key}`", own_choices(kind, modality).replace("|", "\\|"), cell(value)]
        for key, kind, _default, value in option_rows(compose([f"modality={modality}"]))
        if key.startswith(MODALITY_GROUPS)
    ]
    return table(["key", "type", f"value for {modality}"], rows)


def experiments_block(verdicts: dict[str, Any]) -> str:
    rows = []
    for name, spec in experiments().items():
        record = verdicts.get(name, {})
        checked = {(e["expect"], e["encoder"]): e["held"] for e in record.get("expectations", [])}
        lines = []
        for text in spec["expect"]:
            held = [h for (t, _encoder), h in checked.items() if t == text]
            lines.append(f"{cell(text)} {verdict_mark(held)}")
        taken = f" of comparison {', '.join(record['comparisons'])}" if record.get("comparisons") else ""
        when = f" ({record['measured']}, {record['runs']} runs{taken})" if record else ""
        rows.append(
            [
                f"`{name}`",
                spec["modality"],
                grid_cell(spec["encoders"], spec["variants"]),
                spec["about"].replace("|", "\\|"),
                ("<br>".join(lines) or "—") + when,
            ]
        )
    return table(["experiment", "modality", "encoders", "what it tests", "expected → verdict (measured)"], rows)


def grid_cell(encoders: list[str], variants: list[str]) -> str:
    """The encoders, each followed by its own variants (``mrope/interleaved``); × the shared variants."""
    own = [v for v in variants if "/" in v]
    shared = [v for v in variants if "/" not in v]
    names = [n for e in encoders for n in (e, *(v for v in own if v.split("/")[0] == e))]
    listed = ", ".join(f"`{n}`" for n in names) or "—"
    return f"{listed} × {', '.join(f'`{v}`' for v in shared)}" if shared else listed


def blocks(verdicts: dict[str, Any]) -> dict[str, str]:
    out = {"encoders": encoder_block(verdicts), "experiments": experiments_block(verdicts)}
    out.update({f"options:{m}": options_block(m) for m in own_modalities()})
    return out


def render(text: str, generated: dict[str, str]) -> str:
    """``text`` with every marked block replaced by its generated content (unknown names left alone)."""

    def replace(match: re.Match) -> str:
        body = generated.get(match["name"], match["body"])
        return f"{match.group(1)}{body}{match.group(4)}"

    return MARKER.sub(replace, text)


def pages(docs_dir: Path) -> list[Path]:
    return sorted(p for p in docs_dir.rglob("*.md") if MARKER.search(p.read_text(encoding="utf-8")))


#: The page a generated block goes to when no page has its markers yet (a new modality's options).
HOMES = {"options:": "modalities.md"}


def missing(docs_dir: Path, generated: dict[str, str]) -> list[str]:
    """The generated blocks no page marks (a modality added since the docs were made)."""
    marked = {m["name"] for p in pages(docs_dir) for m in MARKER.finditer(p.read_text(encoding="utf-8"))}
    return [name for name in generated if name not in marked]


def _home(docs_dir: Path, name: str) -> Path:
    return docs_dir / next(page for prefix, page in HOMES.items() if name.startswith(prefix))


def stale(docs_dir: Path) -> list[str]:
    """The pages whose generated blocks differ from what the code and configs generate now, or that lack one."""
    generated = blocks(read_verdicts(docs_dir))
    outdated = [str(p) for p in pages(docs_dir) if render(text := p.read_text(encoding="utf-8"), generated) != text]
    return outdated + [f"{_home(docs_dir, name)} (no block {name})" for name in missing(docs_dir, generated)]


def write(docs_dir: Path, echo: Callable[[str], None] = print) -> list[Path]:
    generated = blocks(read_verdicts(docs_dir))
    for name in missing(docs_dir, generated):  # a section of its own, at the end of its page
        home, modality = _home(docs_dir, name), name.split(":", 1)[1]
        section = (
            f"\n## {modality}: options\n\nEvery `{modality}` option, its type and its value, generated from the "
            f"modality's schema and YAML (`make docs`):\n\n<!-- poslab-docs:{name} -->\n<!-- /poslab-docs:{name} -->\n"
        )
        home.write_text(home.read_text(encoding="utf-8").rstrip("\n") + "\n" + section, encoding="utf-8")
    written = []
    for page in pages(docs_dir):
        text = page.read_text(encoding="utf-8")
        new = render(text, generated)
        if new != text:
            page.write_text(new, encoding="utf-8")
            written.append(page)
            echo(f"poslab docs: regenerated {page}")
    return written


def main(argv: list[str] | None = None) -> int:
    """``python -m poslab.tools.docs [--check] [--no-verdicts] [DOCS_DIR]``: refresh the verdicts from the runs
    found, then rewrite the generated blocks (``--check``: only say which pages are stale, exit 1 if any)."""
    args = list(sys.argv[1:] if argv is None else argv)
    check, refresh = "--check" in args, "--no-verdicts" not in args and "--check" not in args
    rest = [a for a in args if not a.startswith("--")]
    docs_dir = Path(rest[0] if rest else "docs")
    if check:
        outdated = stale(docs_dir)
        for page in outdated:
            print(f"poslab docs: {page} is stale: run `make docs`", file=sys.stderr)
        return 1 if outdated else 0
    if refresh:
        refresh_verdicts(docs_dir)
    write(docs_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
