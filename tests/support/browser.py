"""A real headless Chromium for the playground's browser tests, driven by Playwright.

Debian's ``chromium`` package (``scripts/install_browser.sh``, run by ``make test``), never
Playwright's own browser download, which cannot reach its servers from these machines:
Playwright drives it through ``executable_path``. ``browser`` launches a fresh browser for
each test (Playwright gives every launch a new temporary user-data directory, so no storage,
cache or permission carries over); ``new_context()`` on it gives each page its own storage.

    STACK_TEST_CHROMIUM=/path/to/chromium   # another Chromium build [/usr/bin/chromium]
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

CHROMIUM = Path(os.environ.get("STACK_TEST_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--no-sandbox",  # the tests run as root, where Chromium's sandbox cannot start
    "--headless",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture
async def browser() -> AsyncIterator[object]:
    """A freshly launched headless Chromium (a ``playwright.async_api.Browser``)."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"no Chromium at {CHROMIUM}: run scripts/install_browser.sh (make test does)", pytrace=False)
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            await launched.close()
