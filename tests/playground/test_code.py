"""The code tab in Chromium: a fenced answer's code beside its raw text; the real engine's answer."""

from __future__ import annotations

import pytest
from playwright.async_api import expect

from tests.playground.conftest import ADMIN_KEY, READ_KEY, WAIT, aserve_playground, playground_settings
from tests.playground.fenced_engine import (
    COMPLETION_TOKENS,
    FENCED_ANSWER,
    FENCED_CODE,
    MODEL,
    FencedEngine,
)


@pytest.fixture
async def fenced_gateway(tmp_path):
    engine = await FencedEngine().start()
    try:
        settings = playground_settings(engine_url=engine.base_url, engine_key=None, tmp=tmp_path)
        async with aserve_playground(settings) as gateway:
            gateway.engine = engine
            yield gateway
    finally:
        await engine.stop()


async def fill_code_form(page, *, prompt: str, max_tokens: int, sample: bool) -> None:
    await page.fill("#code-prompt", prompt)
    await page.fill("#code-max-tokens", str(max_tokens))
    await page.fill("#code-temperature", "0.4")
    await page.fill("#code-top-p", "0.9")
    await page.fill("#code-repetition-penalty", "1.2")
    if (await page.is_checked("#code-do-sample")) != sample:
        await page.click("#code-do-sample")


async def test_a_fenced_answer_shows_its_code_with_a_copy_button_beside_the_raw_text(fenced_gateway, open_playground):
    visit = await open_playground(fenced_gateway, permissions=["clipboard-read", "clipboard-write"])
    page = visit.page
    await visit.tab("code")
    await fill_code_form(page, prompt="# add two numbers\n", max_tokens=200, sample=True)
    await page.click("#code-generate")

    await expect(page.locator("#code-extracted-0")).to_have_text(FENCED_CODE, timeout=WAIT)
    raw = await page.locator("#code-raw-0").text_content()
    meta = await page.locator("#code-meta").text_content()
    await page.click("#code-results button:has-text('Copy code')")
    await expect(page.locator("#code-results .code-box [role=status]")).to_have_text("Copied.")
    copied = await page.evaluate("navigator.clipboard.readText()")
    await page.click(".request-view summary")
    await visit.screenshot("playground-code")

    assert raw == FENCED_ANSWER  # the raw text, byte for byte
    assert copied == FENCED_CODE
    assert f"finish_reason stop · {COMPLETION_TOKENS} tokens · model {MODEL}" in meta
    # The form's parameters reached the engine: one generation, with what the visitor set.
    (sent,) = fenced_gateway.engine.completions
    assert sent["prompt"] == "# add two numbers\n" and sent["max_tokens"] == 200
    assert sent["temperature"] == 0.4 and sent["top_p"] == 0.9 and sent["repetition_penalty"] == 1.2
    visit.check_clean(ADMIN_KEY, READ_KEY)


async def test_the_code_tab_shows_what_the_real_engine_generated(playground_gateway, open_playground):
    visit = await open_playground(playground_gateway)
    page = visit.page
    await visit.tab("code")
    prompt = "def fibonacci(n):\n    \"\"\"Return the first n Fibonacci numbers.\"\"\"\n"
    await fill_code_form(page, prompt=prompt, max_tokens=40, sample=False)  # greedy: one possible answer
    await page.click("#code-generate")
    await expect(page.locator("#code-meta")).to_contain_text("finish_reason", timeout=WAIT)
    shown_raw = await page.locator("#code-raw-0").text_content()
    shown_code = await page.locator("#code-extracted-0").text_content()
    meta = await page.locator("#code-meta").text_content()

    (sent,) = [r.post_data_json for r in visit.requests if r.method == "POST" and r.url.endswith("/generate/raw")]
    assert sent["prompt"] == prompt and sent["max_tokens"] == 40 and sent["do_sample"] is False
    async with playground_gateway.client() as client:
        direct = (await client.post("/generate/raw", json=sent)).json()
    assert shown_raw == direct["generated_text"]  # greedy decoding: the same answer as a direct call
    assert f"finish_reason {direct['finish_reason']} · {direct['num_tokens']} tokens" in meta
    assert "```" not in shown_raw  # the embedded model writes no fence, so the code is the trimmed text
    assert shown_code == shown_raw.strip()
    visit.check_clean(ADMIN_KEY, READ_KEY)
