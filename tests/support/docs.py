"""The docs as tests read them: a page of docs/, the code blocks under one of its headings.

Tests that run a page's examples take them from the page itself (``code_blocks``), so what
a reader copies is what was run.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCS = REPO_ROOT / "docs"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.S | re.M)


def read_doc(name: str) -> str:
    """docs/<name> (``README.md`` is the repository's own)."""
    return (REPO_ROOT / name if name == "README.md" else DOCS / name).read_text()


def section(page: str, heading: str) -> str:
    """The text under the heading line ``heading`` (e.g. ``"## Resume with the OpenAI SDK"``), up to the next
    heading of the same or a higher level."""
    level = len(heading) - len(heading.lstrip("#"))
    lines = page.split("\n")
    start = lines.index(heading) + 1
    end = len(lines)
    in_fence = False
    for number in range(start, len(lines)):
        line = lines[number]
        if line.startswith("```"):
            in_fence = not in_fence
        elif not in_fence and line.startswith("#"):
            hashes = len(line) - len(line.lstrip("#"))
            if hashes <= level and line[hashes:hashes + 1] == " ":
                end = number
                break
    return "\n".join(lines[start:end])


def code_blocks(page: str, heading: str, language: str) -> list[str]:
    """The fenced ``language`` blocks under ``heading``, in order."""
    return [body for lang, body in FENCE.findall(section(page, heading)) if lang == language]
