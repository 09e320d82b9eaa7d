"""Every relative link in the README and the docs reaches a file, and its ``#anchor`` a heading there, under
GitHub's and the docs site's heading ids alike: ``make test`` finds a broken link before the strict site build
in CI does, and the README (outside the site) is checked at all."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
CODE = re.compile(r"`[^`\n]*`")


def github_id(heading: str) -> str:
    """GitHub's heading id: lower case, punctuation but hyphens and spaces dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def site_id(heading: str) -> str:
    """Python-Markdown's ``toc`` slugify (the docs site): ASCII only, runs of spaces and hyphens to one."""
    ascii_text = unicodedata.normalize("NFKD", heading).encode("ascii", "ignore").decode()
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", ascii_text).strip().lower())


def anchors(page: Path) -> tuple[set[str], set[str]]:
    """The heading ids of ``page`` as GitHub and the site make them (a repeated heading gets -1, -2, …)."""
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    ids: tuple[set[str], set[str]] = (set(), set())
    for make, found in zip((github_id, site_id), ids, strict=True):
        seen: dict[str, int] = {}
        for line in text.splitlines():
            if match := re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line):
                slug = make(match[1].replace("`", ""))
                found.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
                seen[slug] = seen.get(slug, 0) + 1
    return ids


def links(page: Path) -> list[str]:
    text = CODE.sub("", FENCE.sub("", page.read_text(encoding="utf-8")))
    targets = [a or b for a, b in LINK.findall(text)]
    return [t for t in targets if not re.match(r"[a-z]+:", t)]  # http:, https:, mailto:


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_reaches_its_file_and_heading(page):
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no file {file.relative_to(ROOT) if file.is_relative_to(ROOT) else file}")
        elif anchor and file.suffix == ".md":
            github, site = anchors(file)
            if anchor not in github or (file.parent == ROOT / "docs" and anchor not in site):
                broken.append(f"{target}: no heading #{anchor} in {file.name}")
    assert not broken, f"{page.name}: " + "; ".join(broken)


def test_the_link_check_finds_a_missing_file_and_a_missing_heading(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# A `code` title\n\n[ok](#a-code-title) [file](other.md) [gone](#nowhere) `[no](link.md)`\n")
    assert links(page) == ["#a-code-title", "other.md", "#nowhere"]
    assert "a-code-title" in anchors(page)[0] and "a-code-title" in anchors(page)[1]
    assert "nowhere" not in anchors(page)[0]
