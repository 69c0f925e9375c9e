"""Figures a test measured (seconds to notice a failure, to recover), reported after the run.

A test asks for ``figures`` and fills it (``figures["recovered_s"] = 1.2``); the terminal
summary lists every test's figures, and ``.cache/test-results/figures.json`` keeps them for the
run, so the failure table of docs/testing.md can be read off one run of ``make test``. Figures
are never asserted on: what a test asserts is the outcome.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

FIGURES = pytest.StashKey[dict[str, dict]]()
REPORT = Path(__file__).resolve().parents[2] / ".cache" / "test-results" / "figures.json"


@pytest.fixture
def figures(request: pytest.FixtureRequest) -> dict:
    """A dict this test's figures go into (name -> number or short text)."""
    measured: dict = {}
    yield measured
    if measured:
        request.config.stash.setdefault(FIGURES, {})[request.node.nodeid] = measured


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    measured = config.stash.get(FIGURES, {})
    if not measured:
        return
    terminalreporter.section("figures measured by the tests")
    for nodeid, values in measured.items():
        shown = ", ".join(f"{name}={value}" for name, value in values.items())
        terminalreporter.write_line(f"{nodeid.rpartition('::')[2]}: {shown}")
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    previous = json.loads(REPORT.read_text()) if REPORT.exists() else {}
    REPORT.write_text(json.dumps(previous | measured, indent=1, sort_keys=True) + "\n")
