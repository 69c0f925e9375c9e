"""Every relative link of the README and docs/ leads somewhere: the file exists, and so does the heading.

Headings are matched by their GitHub anchors (lower case, punctuation dropped, spaces as
hyphens). Links into code blocks are not links and are not checked.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.docs import DOCS, REPO_ROOT

PAGES = [REPO_ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def prose(path: Path) -> str:
    """The page without its fenced code blocks."""
    return re.sub(r"^```.*?^```$", "", path.read_text(), flags=re.S | re.M)


def anchors(path: Path) -> set[str]:
    headings = re.findall(r"^#+ (.+)$", prose(path), re.M)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


def relative_links(path: Path) -> list[str]:
    return [target for target in LINK.findall(prose(path)) if not re.match(r"[a-z]+:", target)]


def test_the_pages_are_found_and_have_links():
    assert len(PAGES) >= 11 and sum(len(relative_links(page)) for page in PAGES) > 30


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(REPO_ROOT)))
def test_every_relative_link_resolves(page):
    broken = []
    for target in relative_links(page):
        file_part, _, anchor = target.partition("#")
        destination = (page.parent / file_part).resolve() if file_part else page
        if not destination.exists():
            broken.append(f"{target}: no such file")
        elif anchor and destination.suffix == ".md" and anchor not in anchors(destination):
            broken.append(f"{target}: no such heading")
    assert broken == []
