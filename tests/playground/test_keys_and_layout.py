"""Keys, refusals, phone width and the keyboard, in Chromium.

With keys configured, a page without a key says so (401) and asks for one; the key then lives
in localStorage and travels only in the Authorization header. A 403 and a 429 are said plainly.
At phone width nothing scrolls sideways; every control has a name and works from the keyboard.
"""

from __future__ import annotations

import asyncio

import pytest
from playwright.async_api import expect

from tests.playground.conftest import ADMIN_KEY, READ_KEY, WAIT, aserve_playground, playground_settings
from tests.support.fake_engine import running_fake_engine

KEY_STORE = "stack-playground.api-key"


async def test_without_a_key_the_page_shows_the_401_message_and_asks_once(playground_gateway, open_playground):
    visit = await open_playground(playground_gateway, key=None)
    page = visit.page
    await expect(page.locator("#key-panel")).to_be_visible(timeout=WAIT)
    await expect(page.locator("#notice")).to_contain_text("The gateway needs a valid API key (401")
    await expect(page.locator("#notice")).to_be_visible()
    await expect(page.locator("#key-input")).to_be_focused()
    await expect(page.locator("#chat-status")).to_contain_text("401")
    await visit.screenshot("playground-key")

    await page.fill("#key-input", "sk-wrong-key")
    await page.click("#key-form button[type=submit]")
    await expect(page.locator("#key-state")).to_contain_text("invalid API key")
    await expect(page.locator("#key-panel")).to_be_visible()

    await page.fill("#key-input", READ_KEY)
    await page.press("#key-input", "Enter")
    await expect(page.locator("#key-panel")).to_be_hidden(timeout=WAIT)
    await expect(page.locator("#notice")).to_be_hidden()
    await expect(page.locator("#chat-model option").first).to_be_attached()
    assert await page.evaluate(f"localStorage.getItem('{KEY_STORE}')") == READ_KEY

    await page.reload()  # asked once: the saved key is used without asking again
    await expect(page.locator("#chat-model option").first).to_be_attached(timeout=WAIT)
    await expect(page.locator("#key-panel")).to_be_hidden()

    api = [r for r in visit.requests if "/playground/" not in r.url and not r.url.endswith("/health")]
    keyed = [r for r in api if r.headers.get("authorization") == f"Bearer {READ_KEY}"]
    assert len(keyed) >= 2 and all(r.url.endswith("/v1/models") for r in keyed)
    assert all(r.headers.get("authorization") in (None, "Bearer sk-wrong-key", f"Bearer {READ_KEY}") for r in api)

    await page.click("#key-toggle")
    await page.click("#key-forget")
    assert await page.evaluate(f"localStorage.getItem('{KEY_STORE}')") is None
    visit.check_clean(ADMIN_KEY, READ_KEY, "sk-wrong-key")


async def test_a_429_is_said_plainly_while_another_request_of_the_key_is_in_flight_and_stop_still_works(fake_engine_gateway, open_playground):
    visit = await open_playground(fake_engine_gateway, key=READ_KEY)
    page = visit.page
    await page.fill("#chat-max-tokens", "400")  # 400 chunks, 50 ms apart: 20 s in flight
    await page.fill("#chat-input", "Hello")
    await page.click("#chat-send")
    answer = page.locator("#chat-transcript li.msg.assistant").last
    await expect(answer.locator(".text")).not_to_have_text("", timeout=WAIT)
    await visit.tab("code")
    await page.click("#code-generate")
    await expect(page.locator("#notice")).to_contain_text("Too many requests (429", timeout=WAIT)
    await expect(page.locator("#notice")).to_be_visible()
    await expect(page.locator("#notice")).to_contain_text("Try again in 1 s.")
    await expect(page.locator("#code-status")).to_contain_text("429")
    await visit.tab("chat")
    # Stop is a cancel, a control request: admitted although the stream holds the key's one slot.
    await page.click("#chat-stop")
    await expect(page.locator("#chat-status")).to_have_text("Stopped: the generation was cancelled.")
    await expect(answer).to_have_attribute("data-ending", "stopped")
    visit.check_clean(ADMIN_KEY, READ_KEY)


async def test_stop_works_while_the_request_still_waits_for_its_engine(fake_engine_gateway, open_playground):
    engine = fake_engine_gateway.engine
    engine.mode = "hang"  # the engine takes the request and never answers: no response head, ever
    visit = await open_playground(fake_engine_gateway, key=READ_KEY)
    page = visit.page
    heads: list[int] = []
    page.on("response", lambda r: heads.append(r.status)
            if r.request.method == "POST" and r.url.endswith("/v1/chat/completions") else None)
    await page.fill("#chat-input", "Hello")
    await page.click("#chat-send")
    # Enabled with no response at all: the page named the session, so a cancel can reach it.
    await expect(page.locator("#chat-stop")).to_be_enabled()
    deadline = asyncio.get_running_loop().time() + WAIT / 1000
    while not any(r.path.endswith("/chat/completions") for r in engine.received):  # the engine has it
        assert asyncio.get_running_loop().time() < deadline, "the request never reached the engine"
        await asyncio.sleep(0.05)
    assert heads == []
    await page.click("#chat-stop")
    answer = page.locator("#chat-transcript li.msg.assistant").last
    await expect(answer).to_have_attribute("data-ending", "stopped")
    await expect(page.locator("#chat-status")).to_have_text("Stopped: the generation was cancelled.")
    await asyncio.wait_for(engine.request_aborted.wait(), WAIT / 1000)  # the engine request was closed
    assert heads == [200]  # the stream's head came with its cancelled ending
    cancels = [r for r in visit.requests if r.method == "POST" and "/v1/cancel/" in r.url]
    assert len(cancels) == 1
    await expect(page.locator("#chat-send")).to_be_enabled()
    visit.check_clean(ADMIN_KEY, READ_KEY)


async def test_at_phone_width_nothing_scrolls_sideways_and_the_keyboard_reaches_everything(
    fake_engine_gateway, open_playground
):
    visit = await open_playground(fake_engine_gateway, key=READ_KEY, viewport={"width": 390, "height": 844},
                                  device_scale_factor=2, is_mobile=True, has_touch=True)
    page = visit.page
    overflow = "document.documentElement.scrollWidth - window.innerWidth"
    unnamed = """[...document.querySelectorAll('input, select, textarea, button')]
      .filter((el) => el.offsetParent !== null)
      .filter((el) => !(el.labels?.length || el.getAttribute('aria-label') || el.textContent.trim()))
      .map((el) => el.id || el.outerHTML.slice(0, 60))"""

    # The tabs, from the keyboard: arrows, Home and End; the URL names the tab.
    await page.focus("#tab-chat")
    for key, tab in [("ArrowRight", "code"), ("ArrowRight", "market"), ("ArrowRight", "chat"),
                     ("ArrowLeft", "market"), ("Home", "chat"), ("End", "market")]:
        await page.keyboard.press(key)
        await expect(page.locator(f"#tab-{tab}")).to_be_focused()
        await expect(page.locator(f"#tab-{tab}")).to_have_attribute("aria-selected", "true")
        await expect(page.locator(f"#panel-{tab}")).to_be_visible()
        assert await page.evaluate(overflow) <= 0, f"the {tab} tab scrolls sideways at 390 px"
        assert await page.evaluate(unnamed) == [], f"unnamed controls on the {tab} tab"
    assert page.url.endswith("#market")

    # A message, sent from the keyboard alone: Tab into the form, type, Ctrl+Enter.
    await page.keyboard.press("Home")
    await page.focus("#chat-max-tokens")
    await page.keyboard.press("Control+A")
    await page.keyboard.type("12")
    await page.keyboard.press("Tab")  # the system prompt
    await page.keyboard.type("Answer briefly.")
    await page.focus("#chat-input")
    await page.keyboard.type("Hello from the keyboard")
    await page.keyboard.press("Control+Enter")
    answer = page.locator("#chat-transcript li.msg.assistant").last
    await expect(answer).to_have_attribute("data-ending", "completed", timeout=WAIT)
    await expect(answer.locator(".text")).to_have_text(" ".join(f"t{i}" for i in range(12)) + " ")
    (sent,) = [r.post_data_json for r in visit.requests if r.url.endswith("/v1/chat/completions")]
    assert sent["max_tokens"] == 12
    assert sent["messages"] == [{"role": "system", "content": "Answer briefly."},
                                {"role": "user", "content": "Hello from the keyboard"}]
    assert await page.evaluate(overflow) <= 0
    await visit.screenshot("playground-phone")
    visit.check_clean(ADMIN_KEY, READ_KEY)


async def test_an_engine_failure_mid_stream_ends_the_answer_as_failed_keeping_its_text(
    fake_engine_gateway, open_playground
):
    fake_engine_gateway.engine.mode = "break_mid_stream"  # the engine drops the connection half-way
    visit = await open_playground(fake_engine_gateway, key=READ_KEY)
    page = visit.page
    await page.fill("#chat-max-tokens", "20")
    await page.fill("#chat-input", "Hello")
    await page.click("#chat-send")
    answer = page.locator("#chat-transcript li.msg.assistant").last
    await expect(answer).to_have_attribute("data-ending", "failed", timeout=WAIT)
    await expect(answer.locator(".badge")).to_have_text("failed")
    await expect(answer.locator(".text")).to_have_text(" ".join(f"t{i}" for i in range(10)) + " ")
    await expect(answer).to_contain_text("Error from the gateway:")
    await expect(page.locator("#chat-status")).to_have_text("The answer ended with an error.")
    await expect(page.locator("#chat-send")).to_be_enabled()
    visit.check_clean(ADMIN_KEY, READ_KEY)


@pytest.fixture
async def sessionless_gateway(tmp_path):
    """The page on a gateway that keeps no sessions (SESSION_STORE=off), before the fake engine."""
    async with running_fake_engine(models=["fake-model"], chunk_delay=0.05) as engine:
        settings = playground_settings(engine_url=engine.base_url, engine_key=None, tmp=tmp_path,
                                       session_store="off")
        async with aserve_playground(settings) as gateway:
            gateway.engine = engine
            yield gateway


async def test_without_sessions_the_chat_still_streams_and_stop_closes_the_connection(
    sessionless_gateway, open_playground
):
    visit = await open_playground(sessionless_gateway, key=READ_KEY)
    page = visit.page
    await page.fill("#chat-max-tokens", "5")
    await page.fill("#chat-input", "Hello")
    await page.click("#chat-send")
    first = page.locator("#chat-transcript li.msg.assistant").last
    await expect(first).to_have_attribute("data-ending", "completed")
    await expect(first.locator(".text")).to_have_text("t0 t1 t2 t3 t4 ")

    engine = sessionless_gateway.engine
    await page.fill("#chat-max-tokens", "400")  # 20 s of chunks: only closing the connection ends it early
    await page.fill("#chat-input", "Again")
    await page.click("#chat-send")
    second = page.locator("#chat-transcript li.msg.assistant").last
    await expect(page.locator("#chat-status")).to_contain_text("SESSION_STORE=off")
    await page.click("#chat-stop")
    await expect(second).to_have_attribute("data-ending", "stopped")
    await asyncio.wait_for(engine.stream_aborted.wait(), timeout=WAIT / 1000)  # the gateway closed upstream
    posts = [r.post_data_json for r in visit.requests if r.url.endswith("/v1/chat/completions")]
    # The first ask named a session and was refused (400); every ask after it names none.
    assert "session_id" in posts[0] and all("session_id" not in body for body in posts[1:])
    assert len(posts) == 3
    visit.check_clean(ADMIN_KEY, READ_KEY)
