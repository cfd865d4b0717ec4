"""Every relative link in the docs reaches a file, and every #anchor a heading or an id.

Anchors follow GitHub's rule for headings (lower case, punctuation dropped, spaces to
hyphens, a numeric suffix for repeats) or an explicit ``<a id="…">``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
_FENCE = re.compile(r"```.*?```", re.DOTALL)
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def heading_slug(text: str) -> str:
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = page.read_text(encoding="utf-8")
    found = set(re.findall(r'<a id="([^"]+)"', text))
    seen: dict[str, int] = {}
    for match in re.finditer(r"^#{1,6} (.+)$", _FENCE.sub("", text), re.MULTILINE):
        slug = heading_slug(match.group(1))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def broken_links(page: Path) -> list[str]:
    problems = []
    for match in _LINK.finditer(_FENCE.sub("", page.read_text(encoding="utf-8"))):
        target = match.group(1)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:, file:
            continue
        path, _, fragment = target.partition("#")
        destination = (page.parent / path).resolve() if path else page
        if not destination.exists():
            problems.append(f"{target}: no such file")
        elif fragment and destination.suffix == ".md" and fragment not in anchors(destination):
            problems.append(f"{target}: no such anchor")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    assert broken_links(page) == []


def test_the_checker_finds_broken_links(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Real heading: yes\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md#real-heading-yes) [gone](missing.md) [bad](other.md#nope)\n"
        '<a id="here"></a> [self](#here) [web](https://example.com/x#y)\n',
        encoding="utf-8",
    )
    assert broken_links(page) == ["missing.md: no such file", "other.md#nope: no such anchor"]
