"""docs/playground.md tells the truth: its /api/places example, its headers, its setting."""

from __future__ import annotations

import json
import re
from pathlib import Path

from playground.settings import PlaygroundSettings
from tests.marketplace.support import (
    READ,
    client,
    database_url,
    fake_engine,
    settings,
)

DOC = (Path(__file__).resolve().parents[2] / "docs" / "playground.md").read_text()


def block_after(marker: str, language: str) -> str:
    start = DOC.index(marker)
    match = re.compile(rf"```{language}\n(.*?)```", re.S).search(DOC, start)
    assert match, f"no {language} block after {marker!r}"
    return match.group(1)


async def test_the_places_example_is_what_the_route_answers(client):
    documented = json.loads(block_after("`GET /api/places?q=sura&limit=2`:", "json"))
    response = await client.get("/api/places", params={"q": "sura", "limit": 2}, headers=READ)
    assert response.status_code == 200
    assert response.json() == documented


async def test_the_documented_headers_are_the_ones_served(client):
    documented = dict(line.split(": ", 1) for line in block_after("## Security headers", "").strip().splitlines())
    response = await client.get("/playground/index.html")
    assert response.status_code == 200
    for name, value in documented.items():
        if name == "ETag":
            assert re.fullmatch(r'"[0-9a-f]{32}"', response.headers[name])
        else:
            assert response.headers[name] == value, name


def test_the_documented_default_is_the_real_one():
    row = re.search(r"^\| `PLAYGROUND` \| `([a-z]+)` \|", DOC, re.M)
    assert row and row.group(1) == PlaygroundSettings.model_fields["playground"].default
