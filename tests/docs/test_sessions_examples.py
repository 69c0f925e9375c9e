"""docs/sessions.md's examples, run as written against a gateway in front of the fake engine.

The snippets are taken from the page itself; only the gateway's address (and, for curl, the
API key the page reads from ``$API_KEY``) is the test's. The fake engine streams slowly
enough that the drop happens mid-generation, and answers ``t0 t1 ...``, so the resumed
text is known exactly.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import subprocess

from tests.support.docs import code_blocks, read_doc
from tests.support.fake_engine import settings_for
from tests.support.gateway import READ_KEY, running_gateway

DOCS_URL = "http://127.0.0.1:8000"
PAGE = read_doc("sessions.md")
[CURL_WALK] = code_blocks(PAGE, "## Drop and resume with curl", "bash")
[SDK_RESUME] = code_blocks(PAGE, "## Resume with the OpenAI SDK", "python")
[ANTHROPIC_RESUME] = code_blocks(PAGE, "## Anthropic Messages streams", "python")


def complete_events(text: str) -> list[tuple[str | None, str]]:
    """(id, data) of every complete event (ended by its blank line) of an SSE transcript."""
    events = []
    for block in text.split("\n\n")[:-1]:
        lines = block.split("\n")
        event_id = next((line[4:] for line in lines if line.startswith("id: ")), None)
        data = "\n".join(line[6:] for line in lines if line.startswith("data: "))
        if event_id is not None or data:
            events.append((event_id, data))
    return events


def gateway_settings(engine, tmp_path, **overrides):
    return settings_for(engine, database_url=f"sqlite+aiosqlite:///{tmp_path}/gateway.db", **overrides)


async def test_the_curl_walk_resumes_where_the_dropped_connection_left(fake_engine, tmp_path):
    fake_engine.chunk_delay = 0.002  # 1500 tokens: several seconds, so curl's one second cuts it
    settings = gateway_settings(fake_engine, tmp_path, api_keys=[READ_KEY], session_store="sqlite")
    async with running_gateway(settings) as (base_url, app):
        done = await asyncio.to_thread(
            subprocess.run, ["bash", "-c", CURL_WALK.replace(DOCS_URL, base_url)], cwd=tmp_path,
            env={**os.environ, "API_KEY": READ_KEY}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    part1 = complete_events((tmp_path / "part1.txt").read_text())
    part2 = complete_events((tmp_path / "part2.txt").read_text())
    last = part1[-1][0]
    assert done.stdout.startswith(f"resuming after {last}\n")
    # Together: every index once, 0 to the end (1 role chunk + 1500 tokens + [DONE]), one [DONE].
    ids = [event_id for event_id, _ in part1 + part2]
    assert ids == [f"demo-42:{index}" for index in range(1502)]
    assert [data for _, data in part1 + part2].count("[DONE]") == 1 and part2[-1][1] == "[DONE]"
    assert 0 < len(part1) < 1502  # the connection really dropped mid-generation
    lines = done.stdout.splitlines()
    assert lines[1:5] == ["demo-42:1499", "demo-42:1500", "demo-42:1501", "1"]
    assert '"cancelled":false' in lines[5]  # the generation had completed by then
    assert fake_engine.streams_started == 1 and fake_engine.streams_aborted == 0


def run_snippet(snippet: str, base_url: str) -> str:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(snippet.replace(DOCS_URL, base_url), "<docs/sessions.md snippet>", "exec"), {})
    return printed.getvalue()


async def test_the_sdk_resumes_a_dropped_stream_without_asking_the_engine_again(fake_engine, tmp_path):
    fake_engine.chunk_delay = 0.01  # 200 tokens in about two seconds: the drop is mid-generation
    async with running_gateway(gateway_settings(fake_engine, tmp_path, session_store="sqlite")) as (base_url, app):
        printed = await asyncio.to_thread(run_snippet, SDK_RESUME, base_url)
    # The role chunk's empty content, then every token once, in order.
    assert printed == "".join(f"t{i} " for i in range(200)) + "\n"
    assert fake_engine.streams_started == 1 and fake_engine.streams_aborted == 0
    assert fake_engine.last.json["model"] == "fake-model"


async def test_the_anthropic_sdk_resumes_a_dropped_messages_stream(fake_engine, tmp_path):
    fake_engine.chunk_delay = 0.01  # 200 tokens in about two seconds: the drop is mid-generation
    async with running_gateway(gateway_settings(fake_engine, tmp_path, session_store="sqlite")) as (base_url, app):
        printed = await asyncio.to_thread(run_snippet, ANTHROPIC_RESUME, base_url)
    # Every token once, in order, though the first connection was dropped after five events.
    assert printed == "".join(f"t{i} " for i in range(200)) + "\n"
    assert fake_engine.streams_started == 1 and fake_engine.streams_aborted == 0
    sent = fake_engine.last.json
    assert sent["model"] == "fake-model" and "session_id" not in sent  # (the gateway's field is taken out)
