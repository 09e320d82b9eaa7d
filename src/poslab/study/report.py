"""``poslab report``: a Markdown report with PNG figures, built only from ``summary.json`` files.

Works offline and after the fact: point it at run directories (or a folder
holding many) and it groups the finished training runs by (modality,
experiment, encoder), aggregates each metric over seeds as mean ± std (n),
and draws the curves the runs measured (:mod:`poslab.study.report_figures`).
"""

from __future__ import annotations

import errno
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from poslab.errors import PoslabError
from poslab.files import umask
from poslab.modalities.registry import get_modality
from poslab.run.policy import config_hash
from poslab.study import report_figures
from poslab.study.expectations import Expectation, variant_means
from poslab.track.summary import read_summary
from poslab.track.tables import markdown_table

if TYPE_CHECKING:
    from poslab.track.summary import RunSummary


@dataclass(frozen=True)
class Stat:
    mean: float
    std: float | None  # the sample standard deviation; undefined (None) for one run
    n: int

    def __str__(self) -> str:
        return f"{self.mean:.4f} ± {self.std:.4f} (n={self.n})" if self.n > 1 else f"{self.mean:.4f} (n=1)"


def aggregate(values: Sequence[float]) -> Stat | None:
    """Mean ± sample standard deviation over seeds (None for a single run: undefined); None when empty."""
    import pandas as pd  # deferred: pandas, ~0.4 s

    stats = _stats(pd.DataFrame({"value": pd.Series(values, dtype="float64")}))
    return _stat(stats, "value")


def _stats(frame):
    """Per column of a runs x metrics frame: mean, sample std and count over the runs (NaN = not reported)."""
    return frame.agg(["mean", "std", "count"]).T


def _stat(stats, key: str) -> Stat | None:
    if key not in stats.index or not stats.at[key, "count"]:
        return None
    n = int(stats.at[key, "count"])
    return Stat(float(stats.at[key, "mean"]), float(stats.at[key, "std"]) if n > 1 else None, n)


@dataclass
class Group:
    """Runs that differ only in their seed."""

    modality: str
    experiment: str | None
    encoder: str
    config: str  # config_hash without the seed
    runs: list[dict] = field(default_factory=list)
    label: str = ""
    _stats: Any = field(default=None, repr=False, compare=False)  # metric -> mean, std, count
    _stats_for: int = field(default=-1, repr=False, compare=False)  # the number of runs they cover

    def stat(self, key: str) -> Stat | None:
        """Mean ± std (n) of a metric over the runs that report it; one pandas table serves every metric."""
        if self._stats_for != len(self.runs):  # runs are appended while grouping
            import pandas as pd  # deferred: pandas, ~0.4 s

            metrics = pd.DataFrame([r["metrics"] for r in self.runs], dtype="float64")  # NaN: not reported
            self._stats, self._stats_for = _stats(metrics), len(self.runs)
        return _stat(self._stats, key)

    def mean_of(self, key: str) -> float | None:
        """Mean of a top-level summary field (``num_params``, ``wall_time_s``)."""
        values = [r.get(key) for r in self.runs if r.get(key) is not None]
        return statistics.fmean(values) if values else None


def find_summaries(paths: Iterable[str | Path], warn=None) -> list[RunSummary]:
    """Every training ``summary.json`` under ``paths`` (evaluation runs are left out). One that cannot be
    read, or lacks a key a report needs, is skipped with one line to ``warn`` (stderr by default)."""

    warn = warn or (lambda line: print(line, file=sys.stderr))
    found = []
    for root in paths:
        root = Path(root)
        files = [root] if root.is_file() else sorted(root.rglob("summary.json"))
        for path in files:
            try:
                summary = read_summary(path)
            except (OSError, ValueError, TypeError) as exc:
                warn(f"poslab: skipping {path}: {exc if isinstance(exc, ValueError) else type(exc).__name__}")
                continue
            if summary.kind == "train":
                found.append(summary)
    return found


def group_runs(summaries: Iterable[dict]) -> list[Group]:
    """Group by (modality, experiment, encoder, config without seed); label clashing encoders by config."""
    groups: dict[tuple, Group] = {}
    for s in summaries:
        key = (s["modality"], s["config"].get("experiment"), s["encoder"], config_hash(s["config"], ("seed",)))
        groups.setdefault(key, Group(*key)).runs.append(s)

    def order(key: tuple) -> tuple:  # by modality, experiment, encoder, variant (then config)
        variant = groups[key].runs[0]["config"].get("variant") or ""
        return (key[0], str(key[1]), key[2], variant, key[3])

    ordered = [groups[k] for k in sorted(groups, key=order)]
    for g in ordered:
        variant = g.runs[0]["config"].get("variant")
        named = f"{g.encoder}/{variant}" if variant else g.encoder
        twins = [o for o in ordered if (o.modality, o.experiment, o.encoder, o.runs[0]["config"].get("variant"))
                 == (g.modality, g.experiment, g.encoder, variant)]  # fmt: skip
        g.label = named if len(twins) == 1 else f"{named} [{g.config[:6]}]"
    return ordered


def metric_columns(groups: Sequence[Group]) -> list[str]:
    """The modality's headline metrics first, then the metric families it lists as extra that the runs report."""
    modality = get_modality(groups[0].modality)
    present = {k for g in groups for r in g.runs for k in r["metrics"]}
    headline = [k for k in modality.headline if k in present]
    extra = sorted(k for k in present if k.startswith(modality.extra_prefixes))
    return headline + extra


def table(groups: Sequence[Group], columns: Sequence[str]) -> str:
    """Encoder x metric, mean ± std (n), plus parameter count and median step time."""
    rows = []
    for g in groups:
        cells = [str(s) if (s := g.stat(c)) is not None else "—" for c in columns]
        params = g.mean_of("num_params")
        step = g.stat("perf/train_step_ms")
        cells.append(f"{int(params):,}" if params is not None else "—")
        cells.append(f"{step.mean:.1f}" if step else "—")
        rows.append([f"`{g.label}`", *cells])
    return "\n".join(markdown_table(["encoder", *(f"`{c}`" for c in columns), "params", "ms / step"], rows))


def modality_tables(modality: str, groups: Sequence[Group]) -> list[str]:
    """The Markdown lines of the modality's own tables (``Modality.report_tables``)."""
    tables = get_modality(modality).piece("report_tables")
    return tables(groups) if tables else []


def group_means(group: Group) -> dict[str, float]:
    keys = {k for r in group.runs for k in r["metrics"]}
    return {k: s.mean for k in keys if (s := group.stat(k)) is not None}


def check_expectations(
    groups: Sequence[Group], stated: Sequence[str] | None = None
) -> list[tuple[str, str, bool | None, str]]:
    """(expectation, encoder, held, detail) for the ``stated`` expectations (default: those the newest run's
    config states; a run reused from before its experiment's YAML changed carries the old ones). ``held`` is
    None for a check that could not be made, and ``detail`` says why: an expectation about encoders that did
    not run here is one such row (encoder ``—``), never dropped."""

    if stated is None:
        newest = max((r for g in groups for r in g.runs), key=lambda r: str(r.get("created") or ""), default=None)
        stated = (newest["config"].get("expect") if newest is not None else None) or []
    means = {g.label: group_means(g) for g in groups}
    means |= variant_means(means)
    rows = []
    for text in stated:
        expectation = Expectation.parse(text)
        applying = [label for label in means if expectation.applies_to(label)]
        if not applying:
            rows.append((text, "—", None, f"not checked: no run of {text.split(':')[0].strip()} here"))
        if expectation.best and applying:  # one row: the encoder with the widest margin
            scored = [(m, label) for label in applying if (m := expectation.margin(means[label], means)) is not None]
            applying = [max(scored)[1]] if scored else applying[:1]
        for label in applying:
            held, detail = expectation.check(means[label], means)
            rows.append((text, label, held, detail if held is not None else f"not checked: {detail}"))
    return rows


def verdict(rows: Sequence[tuple[str, str, bool | None, str]]) -> str:
    """Over the checks made (a check that could not be made counts for nothing): ``held``, ``did not hold``, or
    ``not checked`` when none could be made."""
    made = [held for _, _, held, _ in rows if held is not None]
    return "not checked" if not made else "held" if all(made) else "did not hold"


def expectation_section(groups: Sequence[Group], stated: Sequence[str] | None = None) -> list[str]:
    """The verdict over the checks made, how many of the stated ones those are, a table of them, and every
    check that could not be made with why."""
    rows = check_expectations(groups, stated)
    if not rows:
        return []
    made = [r for r in rows if r[2] is not None]
    unmade = [r for r in rows if r[2] is None]
    lines = [f"**Expected outcome: {verdict(rows)}** ({len(made)} of {len(rows)} checks made).", ""]
    if made:
        marks = {True: "yes", False: "**no**"}
        cells = [[f"`{text}`", f"`{label}`", detail, marks[held]] for text, label, held, detail in made]
        lines += [*markdown_table(["expectation", "encoder", "values", "held"], cells), ""]
    if unmade:
        lines += ["Not checked, so not counted in the verdict:", ""]
        for text, label, _, detail in unmade:
            which = f" (`{label}`)" if label != "—" else ""
            lines.append(f"- `{text}`{which}: {detail.removeprefix('not checked: ')}")
        lines.append("")
    return lines


def publish(building: Path, parent: Path, stem: str) -> Path:
    """Rename the finished folder ``building`` to ``parent/stem``, or ``stem-2``, ``stem-3`` … when taken (a
    rename onto a folder that holds a report fails), so a report appears whole or not at all, and two reports
    finished in the same second never share a folder."""
    for n in range(1, 1000):
        path = parent / (stem if n == 1 else f"{stem}-{n}")
        try:
            building.rename(path)
            return path
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
    raise FileExistsError(f"no free report folder for {parent / stem}")


def build_report(
    paths: Iterable[str | Path],
    out_root: str | Path = "reports",
    title: str | None = None,
    expect: Mapping[str | None, Sequence[str]] | None = None,
) -> Path:
    """Write ``<out_root>/<modality>-<timestamp>/report.md`` (+ PNGs), whole or not at all; returns the Markdown
    path."""
    summaries = find_summaries(paths)
    if not summaries:
        raise PoslabError(
            f"no finished training runs (summary.json with kind=train) under {', '.join(map(str, paths))}"
        )
    groups = group_runs(summaries)
    modalities = sorted({g.modality for g in groups})
    stem = f"{'+'.join(modalities)}-{time.strftime('%Y%m%d-%H%M%S')}"
    Path(out_root).mkdir(parents=True, exist_ok=True)
    out = Path(tempfile.mkdtemp(dir=out_root, prefix=f".{stem}.", suffix=".tmp"))  # renamed into place when whole
    try:
        out.chmod(0o777 & ~umask())  # mkdtemp's 0700 would hide the report from the machine's other users
        _write_report(out, summaries, groups, modalities, title, expect)
        folder = publish(out, Path(out_root), stem)
    except BaseException:  # a full disk, a signal: nothing half-written is left
        shutil.rmtree(out, ignore_errors=True)
        raise
    return folder / "report.md"


def _write_report(out: Path, summaries: list, groups: list, modalities: list[str], title: str | None,
                  expect: Mapping[str | None, Sequence[str]] | None) -> None:  # fmt: skip
    """The report's Markdown and figures, written into ``out``."""
    from poslab.track import plots  # deferred: matplotlib, ~0.8 s

    lines = [
        f"# {title or 'poslab comparison'}",
        "",
        f"Built {time.strftime('%Y-%m-%d %H:%M')} from {len(summaries)} runs.",
        "",
    ]
    for modality in modalities:
        mgroups = [g for g in groups if g.modality == modality]
        for experiment in sorted({g.experiment for g in mgroups}, key=str):
            egroups = [g for g in mgroups if g.experiment == experiment]
            lines += [f"## {modality}" + (f" — experiment `{experiment}`" if experiment else ""), ""]
            columns = metric_columns(egroups)
            lines += [table(egroups, columns), "", "mean ± standard deviation over seeds; — = not reported.", ""]
            lines += modality_tables(modality, egroups)
            lines += expectation_section(egroups, (expect or {}).get(experiment))
            for stem, caption, fig in report_figures.figures(modality, egroups):
                name = f"{modality}-{experiment or 'default'}-{stem}.png"
                plots.save_figure(fig, out / name)
                plots.close(fig)
                lines += [f"![{caption}]({name})", ""]
    (out / "report.md").write_text("\n".join(lines) + "\n")
