"""docs/openai.md's OpenAI SDK example, run as written against a gateway in front of the fake engine.

The snippet is taken from the page itself; only its address is replaced by the test
gateway's. The fake engine answers ``tok `` per token (``t0 t1 ...`` when streamed), so what
the snippet prints is known exactly.
"""

from __future__ import annotations

import asyncio
import contextlib
import io

from tests.support.docs import code_blocks, read_doc
from tests.support.fake_engine import settings_for
from tests.support.gateway import running_gateway

DOCS_URL = "http://127.0.0.1:8000"
[SDK_EXAMPLE] = code_blocks(read_doc("openai.md"), "## With the OpenAI SDK", "python")


def run_snippet(snippet: str, base_url: str) -> str:
    """Run ``snippet`` against ``base_url``; what it printed."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(snippet.replace(DOCS_URL, base_url), "<docs/openai.md snippet>", "exec"), {})
    return printed.getvalue()


def gateway_settings(engine, tmp_path, **overrides):
    return settings_for(engine, database_url=f"sqlite+aiosqlite:///{tmp_path}/gateway.db", **overrides)


async def test_the_sdk_example_prints_the_reply_then_the_streamed_chunks(fake_engine, tmp_path):
    assert DOCS_URL in SDK_EXAMPLE
    async with running_gateway(gateway_settings(fake_engine, tmp_path)) as (base_url, app):
        printed = await asyncio.to_thread(run_snippet, SDK_EXAMPLE, base_url)
    assert printed == "tok " * 64 + "\n" + "".join(f"t{i} " for i in range(32))
    plain, streamed = fake_engine.received
    assert plain.json["model"] == streamed.json["model"] == "fake-model"  # the alias stack-2.9, resolved
    assert plain.json["max_tokens"] == 64 and streamed.json["stream"] is True
