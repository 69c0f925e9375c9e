"""The chat tab in Chromium on the real engine: streaming, Stop, and resume after a reload."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time

import httpx
import pytest
from playwright.async_api import TimeoutError as PlaywrightTimeout
from playwright.async_api import expect

from tests.playground.conftest import ADMIN_KEY, READ_KEY, WAIT, number_in
from tests.support.engine_gateway import RUNNING, EngineProbe
from tests.support.sse_client import content_of, read_stream

pytestmark = [pytest.mark.integration, pytest.mark.engine]

GENERATED = "vllm:generation_tokens_total"
THROTTLE = 60_000  # bytes/s into the browser: 1,500 tokens of SSE (~400 KB) take about 7 s to arrive


async def start_answer(visit, *, max_tokens: int, message: str = "Tell me a long story about a lighthouse.") -> None:
    """Ask with greedy decoding and a fixed length (ignore_eos), through the page's own form."""
    page = visit.page
    await page.fill("#chat-temperature", "0")
    await page.fill("#chat-max-tokens", str(max_tokens))
    await page.click("details.extra summary")
    await page.fill("#chat-extra", json.dumps({"ignore_eos": True}))
    await page.fill("#chat-input", message)
    await page.click("#chat-send")


def last_answer(page):
    return page.locator("#chat-transcript li.msg.assistant").last


def chat_request(visit) -> dict:
    posts = [r for r in visit.requests if r.method == "POST" and r.url.endswith("/v1/chat/completions")]
    assert len(posts) == 1
    return posts[0].post_data_json


async def session_text(gateway, session_id: str) -> str:
    """The answer as the gateway logged it: the session's events, read directly from the start."""
    async with gateway.client() as client:
        replay = await read_stream(client, "GET", f"/v1/sessions/{session_id}/events")
    assert replay.status == 200 and replay.dones == 1
    return replay.content


async def test_the_answer_streams_in_and_shows_its_figures(playground_gateway, open_playground):
    visit = await open_playground(playground_gateway)
    page = visit.page
    added_headers: list[str] = []
    page.on("response", lambda r: added_headers.append(r.headers.get("x-gateway-added-ms"))
            if r.request.method == "POST" and r.url.endswith("/v1/chat/completions") else None)
    await visit.throttle(THROTTLE)
    await start_answer(visit, max_tokens=1500)

    # Watch the answer while it streams: it must be seen growing, each view a prefix of the next.
    answer = last_answer(page)
    seen: list[str] = []
    deadline = time.monotonic() + WAIT / 1000
    while (await answer.get_attribute("data-ending")) == "streaming":
        text = await answer.locator(".text").text_content() or ""
        if text and (not seen or text != seen[-1]):
            seen.append(text)
        assert time.monotonic() < deadline, "the answer never finished"
        await asyncio.sleep(0.05)
    await expect(answer).to_have_attribute("data-ending", "completed")
    final = await answer.locator(".text").text_content()
    stats = await answer.locator(".stats").text_content()
    await visit.screenshot("playground-chat")

    body = chat_request(visit)
    assert body["stream"] is True and body["temperature"] == 0 and body["max_tokens"] == 1500
    assert body["ignore_eos"] is True and body["session_id"].startswith("pg-")
    assert len(seen) >= 2, f"saw the answer only as {[len(s) for s in seen]} characters while streaming"
    assert all(final.startswith(partial) and len(partial) < len(final) for partial in seen[:-1])
    # What the page shows is exactly what the gateway streamed, nothing repeated or missing.
    assert final == await session_text(playground_gateway, body["session_id"])
    assert "1500 tokens" in stats and "finish_reason length" in stats
    assert number_in(stats, "time to first token") > 0
    assert float(re.search(r"([0-9.]+) tok/s", stats).group(1)) > 0
    assert abs(number_in(stats, "gateway added") - float(added_headers[0])) < 0.5  # the header, as shown
    visit.check_clean(ADMIN_KEY, READ_KEY)


async def test_stop_cancels_the_generation_inside_vllm(playground_gateway, open_playground, idle_vllm_engine):
    # Tokens asked for (ignore_eos: only a cancel ends it early): far more than the engine makes
    # before the page shows the first text, even when vLLM's API server hands them over late.
    long = 30_000  # the page's field allows up to 32,768
    visit = await open_playground(playground_gateway)
    page = visit.page
    answers: list[str] = []  # when the answer's response head reached the browser, and its status
    page.on("response", lambda r: answers.append(f"{r.status} at {time.monotonic():.1f}")
            if r.request.method == "POST" and r.url.endswith("/v1/chat/completions") else None)
    async with httpx.AsyncClient(timeout=30) as engine_client:
        probe = EngineProbe(idle_vllm_engine, engine_client)
        before = await probe.metric(GENERATED)
        await start_answer(visit, max_tokens=long)
        answer = last_answer(page)
        async with explained(visit, probe, answers):
            # Stop once the answer's text is on the page: the generation runs inside vLLM. (Not on
            # vLLM's num_requests_running: a starved API server updates its gauges in bursts, and
            # the gauge once read 0 for the whole 90 s of a running generation.)
            await expect(answer.locator(".text")).not_to_have_text("")
            await expect(page.locator("#chat-stop")).to_be_enabled()  # (still streaming: else say why)
            await page.click("#chat-stop")
            await expect(answer).to_have_attribute("data-ending", "stopped", timeout=WAIT)
            # vLLM aborted it: after a step of the engine's own, nothing runs there any more (a
            # generation not aborted would run on for minutes).
            await probe.wait_until_nothing_runs(timeout=60)
        generated = await probe.metric(GENERATED) - before
    stats = await answer.locator(".stats").text_content()
    await expect(answer.locator(".badge")).to_have_text("stopped")
    await expect(page.locator("#chat-status")).to_have_text("Stopped: the generation was cancelled.")
    assert "finish_reason cancelled" in stats
    assert 0 < generated < long  # it ran, and was cut short (the one-token probes count 1 each)
    assert int(re.search(r"(\d+)≈? tokens", stats).group(1)) < long
    cancels = [r for r in visit.requests if r.method == "POST" and "/v1/cancel/" in r.url]
    assert len(cancels) == 1 and cancels[0].url.endswith(chat_request(visit)["session_id"])
    await expect(page.locator("#chat-send")).to_be_enabled()  # ready for the next message
    visit.check_clean(ADMIN_KEY, READ_KEY)


async def test_a_reload_mid_stream_continues_where_it_was(playground_gateway, open_playground):
    visit = await open_playground(playground_gateway)
    page = visit.page
    await visit.throttle(THROTTLE)  # the answer arrives over seconds: the reload lands inside it
    await start_answer(visit, max_tokens=1500)
    answer = last_answer(page)
    await expect(answer).to_have_attribute("data-ending", "streaming")
    saved = None
    deadline = time.monotonic() + WAIT / 1000
    while saved is None or saved["lastEventId"] is None or not saved["text"]:  # some text received and saved
        saved = await page.evaluate("JSON.parse(sessionStorage.getItem('stack-playground.chat')).live")
        assert saved is not None, "the answer ended before the reload"
        assert time.monotonic() < deadline, "no event arrived"
        await asyncio.sleep(0.05)
    before_reload = await answer.locator(".text").text_content()
    assert saved["lastEventId"].startswith(f"{saved['sessionId']}:")

    await page.reload()
    resumed = last_answer(page)
    await expect(resumed).to_have_attribute("data-ending", "completed", timeout=WAIT)
    final = await resumed.locator(".text").text_content()
    stats = await resumed.locator(".stats").text_content()

    # The key was asked once: after the reload the saved key is used without asking.
    await expect(page.locator("#key-panel")).to_be_hidden()
    follows = [r for r in visit.requests if r.method == "GET" and "/events" in r.url]
    assert len(follows) == 1
    assert follows[0].url.endswith(f"/v1/sessions/{saved['sessionId']}/events")  # nothing in the query
    resumed_after = follows[0].headers["last-event-id"]
    # From the last event the page had saved (or a later one it saved before the reload took effect).
    saved_index = int(saved["lastEventId"].rpartition(":")[2])
    assert resumed_after.startswith(f"{saved['sessionId']}:") and int(resumed_after.rpartition(":")[2]) >= saved_index
    assert final.startswith(before_reload)
    assert final == await session_text(playground_gateway, saved["sessionId"])
    assert "1500 tokens" in stats and "resumed 1×" in stats
    visit.check_clean(ADMIN_KEY, READ_KEY)


@contextlib.asynccontextmanager
async def explained(visit, probe: EngineProbe, answers: list[str]):
    """Fail what runs inside with what each side saw: the page's status line, the answer's
    ending and figures or error, its response head, the session as the gateway has it and the
    engine's counts. (Playwright's timeouts too: a Stop never enabled once said nothing more.)"""
    page = visit.page
    try:
        yield
    except (AssertionError, PlaywrightTimeout) as failure:
        session_id = chat_request(visit)["session_id"]
        async with visit.gateway.client() as client:
            described = await client.get(f"/v1/sessions/{session_id}")
        answer = last_answer(page)
        raise AssertionError(
            f"at {time.monotonic():.1f}: page status {await page.locator('#chat-status').text_content()!r}; "
            f"the answer's ending {await answer.get_attribute('data-ending')!r}, "
            f"{len(await answer.locator('.text').text_content() or '')} characters, "
            f"its lines {await answer.locator('.stats').all_text_contents()!r}; "
            f"response heads {answers}; the gateway's session {described.status_code} {described.text}; "
            f"engine running {await probe.metric(RUNNING)}, generated {await probe.metric(GENERATED)}") from failure
