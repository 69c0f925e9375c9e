"""The playground in a real Chromium, served by a real gateway (uvicorn) on the real vLLM engine.

``playground_gateway`` (one per module): the gateway with a read key and an admin key, the
demo catalogue seeded into SQLite, resumable sessions on SQLite, the page on.
``open_playground`` opens the page in a fresh browser context, enters the key through the
page's own key form (as a visitor would), and records what the browser saw: CSP violations,
uncaught errors and every request, so each test can also check that nothing broke the policy
and that the key never travelled in a URL.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from playwright.async_api import BrowserContext, Page, Request, expect

from gateway.app import create_app
from gateway.config import Settings
from marketplace.feature import MarketplaceFeature
from marketplace.settings import MarketplaceSettings
from playground.feature import PlaygroundFeature
from playground.settings import PlaygroundSettings
from tests.support.fake_engine import running_fake_engine
from tests.support.servers import run_uvicorn, serve_uvicorn

READ_KEY = "sk-playground-read-7f3a9c"
ADMIN_KEY = "sk-playground-admin-41d2e8"
# Every run takes the screenshots (proof that each tab renders); they replace the committed
# ones in docs/screenshots/ only when asked (UPDATE_SCREENSHOTS=1), so a test run leaves the
# working tree as it found it.
REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / ("docs" if os.environ.get("UPDATE_SCREENSHOTS") == "1" else ".cache") / "screenshots"
WAIT = 90_000  # ms: the outcome a test waits for can take this long on a loaded 2-core machine
expect.set_options(timeout=WAIT)  # every expect(...) waits up to WAIT for its outcome (default: 5 s)

# Chromium reports every violation of the page's policy to this binding, on every page load.
REPORT_VIOLATIONS = """
document.addEventListener("securitypolicyviolation", (event) => {
  window.__reportViolation(`${event.violatedDirective} ${event.blockedURI} ${event.sourceFile}:${event.lineNumber}`);
});
"""


@dataclass
class Gateway:
    base_url: str
    app: object

    @property
    def page_url(self) -> str:
        return f"{self.base_url}/playground/"

    def client(self, key: str = ADMIN_KEY) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def playground_settings(*, engine_url: str, engine_key: str | None, tmp: Path, **overrides) -> Settings:
    values = dict(
        vllm_base_url=engine_url,
        vllm_api_key=engine_key,
        api_keys=[READ_KEY],
        admin_api_keys=[ADMIN_KEY],
        database_url=f"sqlite+aiosqlite:///{tmp}/playground.db",
        session_store="sqlite",
        access_log=False,
        engine_poll_interval=60,
        default_max_tokens=48,  # /api/chat answers: short, the answer's text is not what is tested
    )
    values.update(overrides)
    return Settings(**values)


def playground_app(settings: Settings, *, seed_demo_data: bool):
    """The gateway with the marketplace (demo catalogue seeded, or not) and the page on,
    whatever PLAYGROUND and SEED_DEMO_DATA say in this environment."""
    return create_app(settings, features={
        "marketplace": lambda gateway: MarketplaceFeature(gateway, MarketplaceSettings(seed_demo_data=seed_demo_data)),
        "playground": lambda gateway: PlaygroundFeature(gateway, PlaygroundSettings(playground="on")),
    })


@contextlib.contextmanager
def serve_playground(settings: Settings, *, seed_demo_data: bool = True):
    """The gateway under uvicorn, with the page."""
    app = playground_app(settings, seed_demo_data=seed_demo_data)
    with run_uvicorn(app) as base_url:
        yield Gateway(base_url, app)


@contextlib.asynccontextmanager
async def aserve_playground(settings: Settings, *, seed_demo_data: bool = False) -> AsyncIterator[Gateway]:
    """``serve_playground`` from an async test: start-up waits happen off the test's event loop
    (where a fake engine the gateway calls at start-up may be running)."""
    app = playground_app(settings, seed_demo_data=seed_demo_data)
    async with serve_uvicorn(app) as base_url:
        yield Gateway(base_url, app)


@pytest.fixture(scope="module")
def playground_gateway(vllm_engine, tmp_path_factory):
    settings = playground_settings(engine_url=vllm_engine.base_url, engine_key=vllm_engine.api_key,
                                   tmp=tmp_path_factory.mktemp("playground"))
    with serve_playground(settings) as gateway:
        yield gateway


@dataclass
class Visit:
    """One browser context on the page, and what the browser reported while the test ran."""

    context: BrowserContext
    page: Page
    gateway: Gateway
    violations: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)

    async def enter_key(self, key: str) -> None:
        """Type the key into the page's key form, as a visitor asked for one would."""
        await expect(self.page.locator("#key-panel")).to_be_visible(timeout=WAIT)
        await self.page.fill("#key-input", key)
        await self.page.click("#key-form button[type=submit]")
        await expect(self.page.locator("#key-panel")).to_be_hidden(timeout=WAIT)

    async def throttle(self, bytes_per_second: int) -> None:
        """Slow the browser's downloads (DevTools network emulation), so a stream reaches the page
        over seconds: on a busy CPU-only machine Chromium can otherwise receive a whole answer
        in one read, leaving nothing to watch grow or to reload in the middle of."""
        cdp = await self.context.new_cdp_session(self.page)
        await cdp.send("Network.enable")
        await cdp.send("Network.emulateNetworkConditions", {
            "offline": False, "latency": 0, "downloadThroughput": bytes_per_second, "uploadThroughput": -1})

    async def tab(self, name: str) -> None:
        await self.page.click(f"#tab-{name}")
        await expect(self.page.locator(f"#panel-{name}")).to_be_visible()

    async def screenshot(self, name: str) -> Path:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{name}.png"
        await self.page.screenshot(path=str(path), full_page=True)
        return path

    def check_clean(self, *keys: str) -> None:
        """No CSP violation, no uncaught error, and no key in any URL the page asked for."""
        assert self.violations == []
        assert self.errors == []
        for request in self.requests:
            for key in keys:
                assert key not in request.url, request.url


@pytest.fixture
async def open_playground(browser) -> AsyncIterator:
    """``await open_playground(gateway, key=..., **context_options)``: the page, with the key entered."""
    visits: list[Visit] = []

    async def open_(gateway: Gateway, *, key: str | None = ADMIN_KEY, **context_options) -> Visit:
        context = await browser.new_context(**({"viewport": {"width": 1280, "height": 900}} | context_options))
        context.set_default_timeout(WAIT)
        visit = Visit(context=context, page=await context.new_page(), gateway=gateway)
        await context.expose_binding("__reportViolation", lambda source, text: visit.violations.append(text))
        await context.add_init_script(REPORT_VIOLATIONS)
        visit.page.on("pageerror", lambda error: visit.errors.append(str(error)))
        visit.page.on("request", lambda request: visit.requests.append(request))
        await visit.page.goto(gateway.page_url)
        if key is not None:
            await visit.enter_key(key)
            await expect(visit.page.locator("#chat-model option").first).to_be_attached()
        visits.append(visit)
        return visit

    yield open_
    for visit in visits:
        await visit.context.close()


def number_in(text: str, label: str) -> float:
    """The number after ``label`` in a stats line ("gateway added 1.23 ms" -> 1.23)."""
    match = re.search(rf"{re.escape(label)} ([0-9][0-9,.]*)", text)
    assert match, f"no {label!r} figure in {text!r}"
    return float(match.group(1).replace(",", ""))


@pytest.fixture
async def fake_engine_gateway(tmp_path):
    """The page on a gateway in front of the fake engine (tests/support): for what needs no real model.

    Its streams are slow (a chunk every 50 ms) so a test can act while one is in flight, and
    each key may have one request in flight (MAX_INFLIGHT_PER_KEY=1), so a second is a 429.
    """
    async with running_fake_engine(models=["fake-model"], chunk_delay=0.05) as engine:
        settings = playground_settings(engine_url=engine.base_url, engine_key=None, tmp=tmp_path,
                                       max_inflight_per_key=1, flow_control=False)  # (on, it would wait)
        async with aserve_playground(settings) as gateway:
            gateway.engine = engine
            yield gateway


@pytest.fixture(autouse=True)
def _playground_setting_unset(monkeypatch):
    """Every playground test starts from PLAYGROUND unset (auto), whatever the shell says."""
    monkeypatch.delenv("PLAYGROUND", raising=False)
