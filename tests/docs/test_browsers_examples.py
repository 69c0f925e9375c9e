"""docs/browsers.md's example, run as written in headless Chromium from a page of another origin.

A tiny static server on one port serves an empty page; the gateway, on another port, runs in
front of the real engine with an API key. The page runs the documented module script (only the
gateway's address and the key are the test's): it streams with the key in a header, drops the
connection, resumes with ``Last-Event-ID`` through the resume route. With ``CORS_ORIGINS``
naming the page's origin it works; without it, or naming another origin, the browser refuses
the very first call and nothing is generated.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx
import pytest

from gateway.app import create_app
from gateway.config import Settings
from tests.support.docs import code_blocks, read_doc
from tests.support.servers import serve_uvicorn
from tests.support.sse_client import parse_sse

pytestmark = [pytest.mark.integration, pytest.mark.engine, pytest.mark.browser]

KEY = "sk-browser-page-key-6c1e0b"
SESSION = "browser-demo-1"  # the session the example names
[EXAMPLE] = code_blocks(read_doc("browsers.md"), "## A resumable stream from a page", "javascript")
WAIT = 90_000  # ms: a hang guard for a loaded 2-core machine, not a measurement


async def blank_page(scope, receive, send) -> None:
    """The other origin: one empty HTML page for every path."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/html; charset=utf-8")]})
    await send({"type": "http.response.body", "body": b"<!doctype html><title>another origin</title>"})


@contextlib.asynccontextmanager
async def gateway(engine, tmp_path, cors_origins: str) -> AsyncIterator[str]:
    settings = Settings(vllm_base_url=engine.base_url, vllm_api_key=engine.api_key, api_keys=[KEY],
                        cors_origins=cors_origins, session_store="sqlite", features=["none"], access_log=False,
                        database_url=f"sqlite+aiosqlite:///{tmp_path}/gateway.db", engine_poll_interval=60)
    async with serve_uvicorn(create_app(settings)) as url:
        yield url


@dataclass
class Run:
    logged: list[str] = field(default_factory=list)    # console.log lines of the script
    reported: list[str] = field(default_factory=list)  # what the browser itself reported (console errors)
    errors: list[str] = field(default_factory=list)    # uncaught errors of the script


async def run_example(browser, page_url: str, gateway_url: str) -> Run:
    """Open the page and run the documented script on it; what it printed once it logged its line or failed."""
    context = await browser.new_context()
    try:
        page = await context.new_page()
        run = Run()
        finished = asyncio.get_running_loop().create_future()

        def done() -> None:
            if not finished.done():
                finished.set_result(None)

        def on_console(message) -> None:
            if message.type == "log":
                run.logged.append(message.text)
                done()
            elif message.type == "error":
                run.reported.append(message.text)

        def on_error(error) -> None:
            run.errors.append(f"{error.name}: {error.message}")
            done()

        page.on("console", on_console)
        page.on("pageerror", on_error)
        await page.goto(page_url)
        script = EXAMPLE.replace("http://127.0.0.1:8000", gateway_url).replace("sk-your-key", KEY)
        # The whole budget of tokens (ignore_eos): the embedded model may end a greedy answer
        # after a token or two when its batch differs (CPU kernels are not batch invariant),
        # and the example needs more than the five events it reads before the drop.
        assert script.count("temperature: 0,") == 1
        script = script.replace("temperature: 0,", "temperature: 0, ignore_eos: true,")
        await page.add_script_tag(content=script, type="module")
        await asyncio.wait_for(finished, WAIT / 1000)
        return run
    finally:
        await context.close()


async def test_a_page_of_an_allowed_origin_streams_with_its_key_and_resumes(browser, vllm_engine, tmp_path):
    async with serve_uvicorn(blank_page) as page_url, \
            gateway(vllm_engine, tmp_path, cors_origins=f"http://localhost:1,{page_url}") as gateway_url:
        run = await run_example(browser, page_url, gateway_url)
        # What the gateway's log holds for the session, read without the browser.
        async with httpx.AsyncClient(base_url=gateway_url, headers={"Authorization": f"Bearer {KEY}"},
                                     timeout=60) as client:
            state = (await client.get(f"/v1/sessions/{SESSION}")).json()
            replay = await client.get(f"/v1/sessions/{SESSION}/events")
    assert run.errors == [] and run.reported == []
    [line] = run.logged
    events, _ = parse_sse(replay.text.split("\n"))
    count, _, rest = line.partition(" events, resumed after ")
    resumed_after, _, rest = rest.partition(", ended with ")
    ending, _, text = rest.partition(": ")
    # The page got every event of the session once: five before the drop, the rest after it.
    assert int(count) == len(events) == state["events"] > 5
    assert resumed_after == f"{SESSION}:4" and ending == "[DONE]"
    expected = "".join((e.json["choices"][0].get("delta") or {}).get("content") or "" for e in events[:-1])
    assert text == expected and len(text) > 0
    assert state["status"] == "ended" and state["how"] == "completed"


@pytest.mark.parametrize("cors_origins", ["", "https://app.example.com"], ids=["no CORS_ORIGINS", "another origin"])
async def test_a_page_of_any_other_origin_is_refused_before_anything_starts(browser, vllm_engine, tmp_path,
                                                                             cors_origins):
    async with serve_uvicorn(blank_page) as page_url, \
            gateway(vllm_engine, tmp_path, cors_origins=cors_origins) as gateway_url:
        run = await run_example(browser, page_url, gateway_url)
        async with httpx.AsyncClient(base_url=gateway_url, headers={"Authorization": f"Bearer {KEY}"},
                                     timeout=60) as client:
            session = await client.get(f"/v1/sessions/{SESSION}")
    assert run.logged == []
    assert run.errors == ["TypeError: Failed to fetch"]  # the script's first call failed, before any answer
    # And why, as the browser says it: the preflight's answer did not allow the page's origin.
    assert any(f"from origin '{page_url}' has been blocked by CORS policy: Response to preflight request" in line
               for line in run.reported), run.reported
    assert session.status_code == 404  # the preflight failed, so the POST was never sent: nothing started
