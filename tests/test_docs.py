"""The docs hold together: every relative link names a file that exists and, with a
``#fragment``, a heading of that file; the map stays a map."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench" / "README.md"]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    found, fenced = set(), False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            found.add(_slug(line.lstrip("#")))
    return found


def _broken(page: Path) -> list[str]:
    broken = []
    for match in LINK.finditer(page.read_text()):
        target = match.group(1)
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, fragment = target.partition("#")
        linked = page if not path else page.parent / path
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif fragment and linked.suffix == ".md" and fragment not in _anchors(linked):
            broken.append(f"{target}: no such heading")
    return broken


def test_every_relative_link_in_the_docs_leads_somewhere() -> None:
    broken = {str(p.relative_to(ROOT)): b for p in PAGES if (b := _broken(p))}
    assert not broken, broken


def test_the_map_and_the_readme_stay_short() -> None:
    assert len((ROOT / "docs" / "ARCHITECTURE.md").read_text().splitlines()) <= 200
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200
