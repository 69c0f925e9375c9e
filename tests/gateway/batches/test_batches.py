"""The batch lifecycle with the official SDKs against a real (uvicorn) gateway in front of the fake engine.

The real engine's tests (test_batches_engine.py) run the same paths end to end; these cover
every status and refusal quickly, counting what reached the engine.
"""

from __future__ import annotations

import asyncio
import io
import threading
import time

import anthropic
import httpx
import openai
import orjson
import pytest

from gateway.batches import results
from tests.gateway.batches.conftest import chat_line, database, jobs_ready, wait_status
from tests.support.gateway import OTHER_KEY, READ_KEY, running_gateway

_clients: list = []


def sdk(base_url: str, key: str = READ_KEY) -> openai.AsyncOpenAI:
    client = openai.AsyncOpenAI(base_url=base_url + "/v1", api_key=key, max_retries=0)
    _clients.append(client)
    return client


@pytest.fixture(autouse=True)
async def _close_clients():
    yield
    while _clients:
        await _clients.pop().close()


def jsonl(lines: list) -> io.BytesIO:
    return io.BytesIO(b"".join((line if isinstance(line, bytes) else orjson.dumps(line)) + b"\n" for line in lines))


async def submit(client: openai.AsyncOpenAI, lines: list, **extra):
    file = await client.files.create(file=("in.jsonl", jsonl(lines)), purpose="batch")
    return await client.batches.create(input_file_id=file.id, endpoint="/v1/chat/completions",
                                       completion_window="24h", **extra)


async def read_jsonl(client: openai.AsyncOpenAI, file_id: str | None) -> list[dict]:
    if file_id is None:
        return []
    return [orjson.loads(line) for line in (await client.files.content(file_id)).content.splitlines()]


async def test_a_batch_completes_with_one_output_line_per_input(jobs_gateway, fake_engine):
    base_url, _ = jobs_gateway
    client = sdk(base_url)
    lines = [chat_line(f"req-{n}", "fake-model", max_tokens=n + 1) for n in range(12)]
    batch = await submit(client, lines, metadata={"job": "nightly"})
    assert (batch.status, batch.endpoint, batch.metadata) == ("validating", "/v1/chat/completions", {"job": "nightly"})
    batch = await wait_status(lambda: client.batches.retrieve(batch.id), ("completed",))
    assert batch.request_counts.model_dump() == {"total": 12, "completed": 12, "failed": 0}
    assert batch.in_progress_at and batch.finalizing_at and batch.completed_at and batch.error_file_id is None
    assert batch.usage.input_tokens == 12 * 5 and batch.usage.output_tokens == sum(range(1, 13))
    output = await read_jsonl(client, batch.output_file_id)
    by_id = {line["custom_id"]: line for line in output}
    assert sorted(by_id) == sorted(line["custom_id"] for line in lines)
    for n in range(12):
        line = by_id[f"req-{n}"]
        assert line["response"]["status_code"] == 200 and line["error"] is None
        assert line["response"]["body"]["usage"]["completion_tokens"] == n + 1  # its own request's answer
    assert len(fake_engine.received) == 12
    assert {item.json["max_tokens"] for item in fake_engine.received} == set(range(1, 13))
    output_file = await client.files.retrieve(batch.output_file_id)
    assert output_file.purpose == "batch_output"
    assert [b.id async for b in client.batches.list()] == [batch.id]
    assert [b async for b in sdk(base_url, OTHER_KEY).batches.list()] == []
    with pytest.raises(openai.NotFoundError):
        await sdk(base_url, OTHER_KEY).batches.retrieve(batch.id)


async def test_the_batch_usage_sums_the_lines_cached_tokens(jobs_gateway, fake_engine):
    """``usage.input_tokens_details.cached_tokens`` is the lines' sum (it was always 0, whatever the
    engine reported: a prefix-cached batch looked uncached)."""
    base_url, _ = jobs_gateway
    fake_engine.cached_tokens = 3
    client = sdk(base_url)
    batch = await submit(client, [chat_line(f"r{n}", "fake-model") for n in range(4)])
    batch = await wait_status(lambda: client.batches.retrieve(batch.id), ("completed",))
    assert batch.usage.input_tokens == 4 * 5 and batch.usage.input_tokens_details.cached_tokens == 4 * 3
    assert batch.usage.output_tokens_details.reasoning_tokens == 0


async def test_bad_lines_fail_the_batch_with_their_line_numbers(jobs_gateway, fake_engine):
    base_url, _ = jobs_gateway
    client = sdk(base_url)
    lines = [
        chat_line("ok-1", "fake-model"),
        b"{not json",
        {**chat_line("wrong-method", "fake-model"), "method": "GET"},
        {**chat_line("wrong-url", "fake-model"), "url": "/v1/embeddings"},
        chat_line("ok-1", "fake-model"),  # a duplicate custom_id
        chat_line("unknown-model", "no-such-model"),
        chat_line("streamed", "fake-model", stream=True),
        {"method": "POST", "url": "/v1/chat/completions", "body": {"model": "fake-model"}},
    ]
    batch = await submit(client, lines)
    batch = await wait_status(lambda: client.batches.retrieve(batch.id), ("failed",))
    found = {(error.line, error.code, error.param) for error in batch.errors.data}
    assert found == {(2, "invalid_json_line", None), (3, "invalid_method", "method"), (4, "mismatched_endpoint", "url"),
                     (5, "duplicate_custom_id", "custom_id"), (6, "model_not_found", "body.model"),
                     (7, "invalid_value", "body.stream"), (8, "missing_required_parameter", "custom_id")}
    assert batch.failed_at and batch.output_file_id is None and batch.request_counts.total == 0
    assert fake_engine.received == []  # nothing of a file partly wrong runs


async def test_a_problem_of_the_whole_file_names_no_line(jobs_gateway):
    """OpenAI's ``BatchError.line`` is the line "if applicable": an empty file's error has none
    (it was ``0``, a line number no file has)."""
    base_url, _ = jobs_gateway
    client = sdk(base_url)
    batch = await submit(client, [])
    batch = await wait_status(lambda: client.batches.retrieve(batch.id), ("failed",))
    assert [(error.code, error.line) for error in batch.errors.data] == [("empty_file", None)]


async def test_a_custom_id_with_a_nul_character_is_a_line_error(jobs_gateway):
    """PostgreSQL text cannot hold NUL: storing such a line failed on every round, the batch stayed
    validating and the other batches of its replica, any key's, waited behind it."""
    base_url, _ = jobs_gateway
    client = sdk(base_url)
    batch = await submit(client, [chat_line("ok", "fake-model"), chat_line("a\x00b", "fake-model")])
    batch = await wait_status(lambda: client.batches.retrieve(batch.id), ("failed",))
    assert [(error.line, error.code, error.param) for error in batch.errors.data] == [(2, "invalid_value", "custom_id")]


async def test_an_error_quotes_only_the_start_of_a_lines_value(jobs_gateway):
    """A batch's errors are stored with it and sent with every retrieve and list: a megabyte-long url or model
    quoted whole made a 2 MB file a 2 MB batch object."""
    base_url, _ = jobs_gateway
    client = sdk(base_url)
    long = "x" * 1_000_000
    batch = await submit(client, [{**chat_line("long-url", "fake-model"), "url": "/" + long},
                                  chat_line("long-model", long)])
    batch = await wait_status(lambda: client.batches.retrieve(batch.id), ("failed",))
    assert {(error.line, error.code) for error in batch.errors.data} == {(1, "mismatched_endpoint"),
                                                                          (2, "model_not_found")}
    assert all(len(error.message) < 300 and "xxx" in error.message for error in batch.errors.data)


@pytest.mark.parametrize("body,param", [
    ({"endpoint": "/v1/chat/completions", "completion_window": "24h"}, "input_file_id"),
    ({"input_file_id": "file-x", "endpoint": "/v1/moderations", "completion_window": "24h"}, "endpoint"),
    ({"input_file_id": "file-x", "endpoint": "/v1/chat/completions", "completion_window": "1h"}, "completion_window"),
    ({"input_file_id": "file-nope", "endpoint": "/v1/chat/completions", "completion_window": "24h"}, "input_file_id"),
    ({"input_file_id": "file-x", "endpoint": "/v1/chat/completions", "completion_window": "24h",
      "output_expires_after": {"anchor": "batch_created_at", "seconds": 3600}}, "output_expires_after.anchor"),
    ({"input_file_id": "file-x", "endpoint": "/v1/chat/completions", "completion_window": "24h",
      "output_expires_after": {"anchor": "created_at", "seconds": 60}}, "output_expires_after.seconds"),
])
async def test_create_refusals_name_the_field(jobs_gateway, body, param):
    base_url, _ = jobs_gateway
    with pytest.raises(openai.BadRequestError) as caught:
        await sdk(base_url).post("/batches", body=body, cast_to=object)
    assert caught.value.body["param"] == param


async def test_output_expires_after_sets_how_long_the_output_and_error_files_live(jobs_gateway, fake_engine):
    """The SDK's ``output_expires_after`` (anchored at the file's creation) was ignored: the output
    and error files lived FILES_RETENTION_SECONDS (30 days) whatever the batch asked."""
    base_url, _ = jobs_gateway
    fake_engine.mode = "http_400"  # (every line in the error file; the output file is checked below)
    client = sdk(base_url)
    failing = await submit(client, [chat_line("a", "fake-model")],
                           output_expires_after={"anchor": "created_at", "seconds": 3600})
    failing = await wait_status(lambda: client.batches.retrieve(failing.id), ("completed",))
    fake_engine.mode = "ok"
    ok = await submit(client, [chat_line("b", "fake-model")], output_expires_after={"anchor": "created_at",
                                                                                    "seconds": 7200})
    ok = await wait_status(lambda: client.batches.retrieve(ok.id), ("completed",))
    errors, output = (await client.files.retrieve(failing.error_file_id), await client.files.retrieve(ok.output_file_id))
    assert (errors.expires_at - errors.created_at, output.expires_at - output.created_at) == (3600, 7200)
    plain = await submit(client, [chat_line("c", "fake-model")])
    plain = await wait_status(lambda: client.batches.retrieve(plain.id), ("completed",))
    kept = await client.files.retrieve(plain.output_file_id)
    assert kept.expires_at - kept.created_at == 30 * 24 * 3600  # without it: FILES_RETENTION_SECONDS


async def test_cancel_stops_queued_lines_and_lets_running_ones_finish(jobs_settings, fake_engine):
    fake_engine.response_delay = 0.5
    async with running_gateway(jobs_settings(batch_concurrency=2)) as (base_url, _):
        await jobs_ready(base_url)
        client = sdk(base_url)
        batch = await submit(client, [chat_line(f"r{n}", "fake-model") for n in range(10)])
        await wait_status(lambda: client.batches.retrieve(batch.id), ("in_progress",))
        while not fake_engine.received:
            await wait_status(lambda: client.batches.retrieve(batch.id), ("in_progress",))
        cancelling = await client.batches.cancel(batch.id)
        assert cancelling.status == "cancelling" and cancelling.cancelling_at
        batch = await wait_status(lambda: client.batches.retrieve(batch.id), ("cancelled",))
        ran = len(fake_engine.received)
        assert 1 <= ran <= 4  # the lines running at the cancel (two at a time), never the rest
        assert batch.request_counts.completed == ran and batch.request_counts.failed == 10 - ran
        output = await read_jsonl(client, batch.output_file_id)
        errors = await read_jsonl(client, batch.error_file_id)
        assert len(output) == ran and all(line["response"]["status_code"] == 200 for line in output)
        assert len(errors) == 10 - ran and {line["error"]["code"] for line in errors} == {"batch_cancelled"}
        assert sorted(line["custom_id"] for line in output + errors) == sorted(f"r{n}" for n in range(10))
        with pytest.raises(openai.ConflictError):
            done = await submit(client, [chat_line("x", "fake-model")])
            await wait_status(lambda: client.batches.retrieve(done.id), ("completed",))
            await client.batches.cancel(done.id)


async def test_a_cancelled_batch_goes_from_cancelling_to_cancelled_never_finalizing(jobs_settings, fake_engine,
                                                                                     monkeypatch):
    """OpenAI's ``finalizing`` is "the batch has completed and the results are being prepared": a
    cancelled batch shows ``cancelling`` while its files are written (it showed ``finalizing``, which
    a poller reads as a batch that completed), as docs/batches.md says: cancelling -> cancelled."""
    writing, written = threading.Event(), threading.Event()
    real = results.write_openai_files

    async def held(*args, **kwargs):  # (in the gateway's thread and loop)
        writing.set()
        await asyncio.to_thread(written.wait, 60)
        return await real(*args, **kwargs)

    monkeypatch.setattr(results, "write_openai_files", held)
    fake_engine.response_delay = 0.3
    async with running_gateway(jobs_settings(batch_concurrency=1)) as (base_url, _):
        await jobs_ready(base_url)
        client = sdk(base_url)
        batch = await submit(client, [chat_line(f"r{n}", "fake-model") for n in range(5)])
        await until_true(lambda: fake_engine.received, "the first line at the engine")
        await client.batches.cancel(batch.id)
        await until_true(writing.is_set, "the cancelled batch's files being written")
        try:
            seen = await client.batches.retrieve(batch.id)
        finally:
            written.set()
        assert seen.status == "cancelling"
        batch = await wait_status(lambda: client.batches.retrieve(batch.id), ("cancelled",))
        assert batch.cancelled_at and batch.error_file_id


async def until_true(condition, what: str, timeout: float = 60.0) -> None:
    """A hang guard around a condition on the gateway's or the fake engine's state."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} not seen after {timeout}s"
        await asyncio.sleep(0.02)


async def test_cancel_takes_lines_waiting_for_flow_control_out_of_its_queue(jobs_settings, fake_engine):
    """An interactive stream in flight holds the batch band to its floor (1 line at the engine), so
    the batch's other lines wait in flow control's queue; the cancel empties it at once, without the
    stream ending (before the fix they waited until a slot freed, or the queue's 30 s timeout)."""
    fake_engine.hold, fake_engine.answer_hold = asyncio.Event(), asyncio.Event()
    # (the queue's own timeout far beyond the hang guard: only the cancel can empty it in time)
    settings = jobs_settings(batch_concurrency=4, flow_yield_floor=1, flow_queue_timeout_seconds=3600)
    async with running_gateway(settings) as (base_url, app), \
            httpx.AsyncClient(headers={"authorization": f"Bearer {READ_KEY}"}, timeout=120) as http:
        await jobs_ready(base_url)
        scheduler = app.state.gateway.relay.flow.scheduler
        chat = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "stream": True}
        stream = asyncio.create_task(http.post(f"{base_url}/v1/chat/completions", json=chat))
        await until_true(lambda: fake_engine.streams_active == 1, "the interactive stream at the engine")
        client = sdk(base_url)
        batch = await submit(client, [chat_line(f"r{n}", "fake-model") for n in range(10)])
        await until_true(lambda: len(fake_engine.received) == 2 and scheduler.queued() == 3,
                         "one line at the engine and three waiting in the queue")
        await client.batches.cancel(batch.id)
        await until_true(lambda: scheduler.queued() == 0, "the queue emptied by the cancel")
        assert fake_engine.streams_active == 1  # the stream still holds its grant: the cancel did it
        fake_engine.answer_hold.set()  # the line at the engine finishes
        batch = await wait_status(lambda: client.batches.retrieve(batch.id), ("cancelled",))
        fake_engine.hold.set()
        assert (await stream).status_code == 200
    assert batch.request_counts.completed == 1 and batch.request_counts.failed == 9
    assert len(fake_engine.received) == 2  # the stream and the one line: no waiting line ever reached it


async def test_a_batch_expires_at_its_window(jobs_settings, fake_engine):
    fake_engine.response_delay = 0.3
    async with running_gateway(jobs_settings(batch_concurrency=1, batch_window_seconds=1.0)) as (base_url, _):
        await jobs_ready(base_url)
        client = sdk(base_url)
        batch = await submit(client, [chat_line(f"r{n}", "fake-model") for n in range(30)])
        batch = await wait_status(lambda: client.batches.retrieve(batch.id), ("expired",))
        ran = len(fake_engine.received)
        assert 0 < ran < 30 and batch.expired_at
        errors = await read_jsonl(client, batch.error_file_id)
        assert {line["error"]["code"] for line in errors} == {"batch_expired"} and len(errors) == 30 - ran


def ending_as(settings, batch_id: str) -> str | None:
    """The end a running batch is on its way to (the store's ``ended_as``; no API shows it)."""
    connection = database(settings)
    try:
        return connection.execute("select ended_as from gateway_batches where id = ?", (batch_id,)).fetchone()[0]
    finally:
        connection.close()


async def test_a_cancel_after_the_window_ran_out_is_refused_and_the_batch_ends_expired(jobs_settings, fake_engine):
    """Past its window a batch waits for its running lines, still ``in_progress``, then ends ``expired``.
    A cancel in that time made it ``cancelling`` and then ``cancelled`` (its lines not started already
    ``batch_expired``, the webhook ``batch.cancelled``): an expiry overridden. It is a 409 now, as a
    cancel of an ended batch is, and the batch ends as it was ending."""
    fake_engine.answer_hold = asyncio.Event()  # the first line stays at the engine past the window
    settings = jobs_settings(batch_concurrency=1, batch_window_seconds=1.0)
    async with running_gateway(settings) as (base_url, _):
        await jobs_ready(base_url)
        client = sdk(base_url)
        batch = await submit(client, [chat_line(f"r{n}", "fake-model") for n in range(3)])
        await until_true(lambda: fake_engine.received, "the first line at the engine")
        await until_true(lambda: ending_as(settings, batch.id) == "expired", "the batch ending as expired")
        try:
            with pytest.raises(openai.ConflictError) as refused:
                await client.batches.cancel(batch.id)
        finally:
            fake_engine.answer_hold.set()
        assert "expired" in refused.value.message, refused.value.message
        batch = await wait_status(lambda: client.batches.retrieve(batch.id), ("expired", "cancelled"))
        assert batch.status == "expired" and batch.cancelling_at is None and batch.cancelled_at is None, batch
        assert batch.request_counts.completed == 1 and batch.request_counts.failed == 2
        errors = await read_jsonl(client, batch.error_file_id)
        assert {line["error"]["code"] for line in errors} == {"batch_expired"}


async def test_engine_errors_are_the_lines_results(jobs_gateway, fake_engine):
    base_url, _ = jobs_gateway
    fake_engine.mode = "http_400"
    client = sdk(base_url)
    batch = await submit(client, [chat_line("a", "fake-model"), chat_line("b", "fake-model")])
    batch = await wait_status(lambda: client.batches.retrieve(batch.id), ("completed",))
    assert batch.request_counts.model_dump() == {"total": 2, "completed": 0, "failed": 2}
    errors = await read_jsonl(client, batch.error_file_id)
    assert {line["response"]["status_code"] for line in errors} == {400}
    assert errors[0]["response"]["body"]["error"]["param"] == "temperature"


async def test_batches_list_pages(jobs_gateway):
    base_url, _ = jobs_gateway
    client = sdk(base_url)
    made = [(await submit(client, [chat_line("a", "fake-model")])).id for _ in range(3)]
    page = await client.batches.list(limit=2)
    assert [b.id for b in page.data] == made[::-1][:2] and page.has_more
    assert [b.id async for b in client.batches.list(limit=2)] == made[::-1]


async def test_an_unknown_list_cursor_is_a_404_naming_its_own_parameter(jobs_gateway):
    base_url, _ = jobs_gateway
    async with httpx.AsyncClient(base_url=base_url, headers={"Authorization": f"Bearer {READ_KEY}"}) as client:
        for path, param in (("/v1/batches?after=batch_nope", "after"),
                            ("/v1/messages/batches?after_id=msgbatch_nope", "after_id"),
                            ("/v1/messages/batches?before_id=msgbatch_nope", "before_id")):
            response = await client.get(path)
            assert response.status_code == 404, path
            error = response.json()["error"]
            assert error["message"].endswith(f"_nope (given as {param})")
            if path.startswith("/v1/messages"):
                assert error["type"] == "not_found_error"  # Anthropic's type
            else:  # OpenAI's type for a 404 (Anthropic's envelope has no param: the message names it)
                assert error["type"] == "invalid_request_error" and error["param"] == param


async def test_a_nul_character_in_a_list_cursor_is_a_400_naming_it(jobs_gateway):
    """PostgreSQL refuses NUL even in a comparison: the cursor reached the database and came back a 503 'retry'."""
    base_url, _ = jobs_gateway
    async with httpx.AsyncClient(base_url=base_url, headers={"Authorization": f"Bearer {READ_KEY}"}) as client:
        for path, param in (("/v1/batches?after=%00", "after"), ("/v1/messages/batches?after_id=%00", "after_id"),
                            ("/v1/messages/batches?before_id=%00", "before_id")):
            response = await client.get(path)
            assert response.status_code == 400, (path, response.text)
            assert response.json()["error"]["message"].startswith(f"{param}:")


async def test_a_messages_batch_with_the_anthropic_sdk(jobs_gateway, fake_engine):
    base_url, _ = jobs_gateway
    client = anthropic.AsyncAnthropic(base_url=base_url, api_key=READ_KEY, max_retries=0)
    _clients.append(client)
    requests = [{"custom_id": f"m{n}", "params": {"model": "fake-model", "max_tokens": 8,
                                                 "messages": [{"role": "user", "content": "hi"}]}} for n in range(3)]
    requests.append({"custom_id": "unknown", "params": {"model": "nope", "max_tokens": 8, "messages": []}})
    batch = await client.messages.batches.create(requests=requests)
    assert batch.type == "message_batch" and batch.id.startswith("msgbatch_")
    assert batch.processing_status == "in_progress" and batch.request_counts.processing == 4
    batch = await wait_status(lambda: client.messages.batches.retrieve(batch.id), ("ended",))
    # The fake engine has no /v1/messages: its 404 is each line's error; the unknown model is the gateway's.
    assert batch.request_counts.errored == 4 and batch.results_url.endswith(f"/v1/messages/batches/{batch.id}/results")
    results = {item.custom_id: item.result async for item in await client.messages.batches.results(batch.id)}
    assert sorted(results) == ["m0", "m1", "m2", "unknown"]
    assert results["unknown"].type == "errored" and results["unknown"].error.error.type == "not_found_error"
    assert [b.id async for b in client.messages.batches.list()] == [batch.id]
    with pytest.raises(anthropic.NotFoundError):
        other = anthropic.AsyncAnthropic(base_url=base_url, api_key=OTHER_KEY, max_retries=0)
        _clients.append(other)
        await other.messages.batches.retrieve(batch.id)
    deleted = await client.messages.batches.delete(batch.id)
    assert (deleted.id, deleted.type) == (batch.id, "message_batch_deleted")
    with pytest.raises(anthropic.NotFoundError):
        await client.messages.batches.retrieve(batch.id)


async def test_messages_batch_refusals_in_anthropics_envelope(jobs_gateway):
    base_url, _ = jobs_gateway
    client = anthropic.AsyncAnthropic(base_url=base_url, api_key=READ_KEY, max_retries=0)
    _clients.append(client)
    params = {"model": "fake-model", "max_tokens": 8, "messages": []}
    for requests, param in (([{"custom_id": "a b", "params": params}], "requests.0.custom_id"),
                            ([{"custom_id": "a\n", "params": params}], "requests.0.custom_id"),  # `$` allowed it
                            ([{"custom_id": "a", "params": params}, {"custom_id": "a", "params": params}],
                             "requests.1.custom_id"),
                            ([{"custom_id": "a", "params": {**params, "stream": True}}], "requests.0.params.stream")):
        with pytest.raises(anthropic.BadRequestError) as caught:
            await client.messages.batches.create(requests=requests)
        assert caught.value.body["type"] == "error" and caught.value.body["error"]["type"] == "invalid_request_error"
        assert caught.value.body["error"]["message"].startswith(param)
    batch = await client.messages.batches.create(requests=[{"custom_id": "a", "params": params}])
    cancelled = await client.messages.batches.cancel(batch.id)
    assert cancelled.processing_status in ("canceling", "ended")


async def ended_messages_batch(base_url: str) -> str:
    client = anthropic.AsyncAnthropic(base_url=base_url, api_key=READ_KEY, max_retries=0)
    _clients.append(client)
    params = {"model": "fake-model", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    batch = await client.messages.batches.create(requests=[{"custom_id": "a", "params": params}])
    await wait_status(lambda: client.messages.batches.retrieve(batch.id), ("ended",))
    return batch.id


async def test_results_url_is_https_behind_a_tls_proxy(jobs_gateway):
    # The SDK fetches results_url with the API key: behind a proxy that terminates TLS, the request
    # reaches the gateway over plain HTTP, and an http:// URL would send the key in clear.
    base_url, _ = jobs_gateway
    batch_id = await ended_messages_batch(base_url)
    path = f"/v1/messages/batches/{batch_id}"
    async with httpx.AsyncClient(base_url=base_url, headers={"x-api-key": READ_KEY}) as client:
        direct = (await client.get(path)).json()["results_url"]
        proxied = (await client.get(path, headers={"x-forwarded-proto": "https"})).json()["results_url"]
        downgraded = (await client.get(path, headers={"x-forwarded-proto": "http"})).json()["results_url"]
    host = base_url.removeprefix("http://")
    assert direct == downgraded == f"http://{host}{path}/results"
    assert proxied == f"https://{host}{path}/results"


async def test_results_url_uses_public_base_url_when_set(jobs_settings):
    async with running_gateway(jobs_settings(public_base_url="https://gateway.example.com/llm/")) as (base_url, _):
        await jobs_ready(base_url)
        batch_id = await ended_messages_batch(base_url)
        async with httpx.AsyncClient(base_url=base_url, headers={"x-api-key": READ_KEY}) as client:
            shown = (await client.get(f"/v1/messages/batches/{batch_id}")).json()
    assert shown["results_url"] == f"https://gateway.example.com/llm/v1/messages/batches/{batch_id}/results"


async def test_a_batch_whose_step_keeps_failing_does_not_hold_the_others_back(jobs_gateway):
    # One batch's step failing on every round (a problem of its own, e.g. data its database refuses)
    # ended each round before the batches behind it were looked at: they stayed validating for good.
    base_url, app = jobs_gateway
    client = sdk(base_url)
    worker = app.state.jobs.worker
    validate = worker._validate
    poisoned_file = await client.files.create(file=("a.jsonl", jsonl([chat_line("a", "fake-model")])), purpose="batch")

    async def failing_for_one(record, epoch):
        if record.input_file_id == poisoned_file.id:
            raise RuntimeError("this batch's step fails every time")
        await validate(record, epoch)

    worker._validate = failing_for_one  # (before the batch exists: its first step fails too)
    poisoned = await client.batches.create(input_file_id=poisoned_file.id, endpoint="/v1/chat/completions",
                                           completion_window="24h")
    behind = await submit(client, [chat_line("b", "fake-model")])
    done = await wait_status(lambda: client.batches.retrieve(behind.id), ("completed", "failed"), timeout=30)
    assert done.status == "completed"
    assert (await client.batches.retrieve(poisoned.id)).status == "validating"


# --- what a key keeps is bounded: its batches' lines count with its files against the quota ---

def stored_lines(settings) -> int:
    with database(settings) as connection:
        return connection.execute("SELECT COUNT(*) FROM gateway_batch_lines").fetchone()[0]


async def test_an_ended_batch_keeps_no_copy_of_its_lines_its_files_are_its_results(jobs_settings, fake_engine):
    """Creating and cancelling batches in a loop grew the lines table (each a copy of the input) for ever."""
    settings = jobs_settings()
    async with running_gateway(settings) as (base_url, _):
        await jobs_ready(base_url)
        client = sdk(base_url)
        done = await submit(client, [chat_line(f"r{n}", "fake-model") for n in range(3)])
        done = await wait_status(lambda: client.batches.retrieve(done.id), ("completed",))
        fake_engine.response_delay = 5  # the next batch is cancelled while its first lines run
        cancelled = await submit(client, [chat_line(f"c{n}", "fake-model") for n in range(20)])
        await wait_status(lambda: client.batches.retrieve(cancelled.id), ("in_progress",))
        await client.batches.cancel(cancelled.id)
        fake_engine.response_delay = 0
        cancelled = await wait_status(lambda: client.batches.retrieve(cancelled.id), ("cancelled",))
        outputs = [len(await read_jsonl(client, done.output_file_id)),
                   len(await read_jsonl(client, cancelled.output_file_id) + await read_jsonl(client, cancelled.error_file_id))]
    assert outputs == [3, 20]  # the results are in the files
    assert stored_lines(settings) == 0


async def test_message_batches_count_against_the_keys_storage_quota(jobs_settings):
    settings = jobs_settings(files_quota_bytes_per_key=4000)
    content = "x" * 800  # one request of about 900 bytes

    def requests(tag: str) -> list[dict]:
        return [{"custom_id": tag, "params": {"model": "nope", "max_tokens": 8,
                                              "messages": [{"role": "user", "content": content}]}}]

    async with running_gateway(settings) as (base_url, _):
        await jobs_ready(base_url)
        client = anthropic.AsyncAnthropic(base_url=base_url, api_key=READ_KEY, max_retries=0)
        other = anthropic.AsyncAnthropic(base_url=base_url, api_key=OTHER_KEY, max_retries=0)
        _clients.extend([client, other])
        kept = []
        with pytest.raises(anthropic.BadRequestError) as refused:
            for n in range(10):  # each ends at once (an unknown model), its results kept until deleted
                batch_id = (await client.messages.batches.create(requests=requests(f"m{n}"))).id
                kept.append(await wait_status(lambda b=batch_id: client.messages.batches.retrieve(b), ("ended",)))
        assert 2 <= len(kept) <= 4  # 4000 bytes hold a few, never ten
        assert "FILES_QUOTA_BYTES_PER_KEY" in str(refused.value)
        assert (await other.messages.batches.create(requests=requests("o"))).id  # another key has its own
        await client.messages.batches.delete(kept[0].id)  # deleting an ended batch makes room
        assert (await client.messages.batches.create(requests=requests("again"))).id


async def test_a_batch_whose_copy_would_pass_the_quota_is_refused_naming_its_file(jobs_settings):
    settings = jobs_settings(files_quota_bytes_per_key=3000)
    async with running_gateway(settings) as (base_url, _):
        await jobs_ready(base_url)
        client = sdk(base_url)
        file = await client.files.create(file=("in.jsonl", jsonl([chat_line("r", "fake-model", "x" * 1400)])),
                                         purpose="batch")  # about 1,550 bytes: the file and its copy pass 3000
        with pytest.raises(openai.BadRequestError) as refused:
            await client.batches.create(input_file_id=file.id, endpoint="/v1/chat/completions",
                                        completion_window="24h")
    assert refused.value.body["code"] == "storage_quota_exceeded" and refused.value.body["param"] == "input_file_id"
