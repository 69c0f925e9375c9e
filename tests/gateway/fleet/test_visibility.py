"""What the fleet shows: /health lists every engine (no secrets, no error text), /metrics counts per engine."""

from __future__ import annotations

import time

from tests.gateway.fleet.conftest import serving
from tests.gateway.fleet.fakes import fake_fleet, fleet_settings

CHAT = "/v1/chat/completions"


def chat(i: int, **extra) -> dict:
    return {"model": "fake-model", "messages": [{"role": "user", "content": f"q{i}"}], "max_tokens": 2, **extra}


async def test_health_lists_every_engine_with_its_state_and_load_and_nothing_secret():
    async with fake_fleet(2) as (busy, down):
        busy.running, busy.waiting = 3, 1
        settings = fleet_settings([busy, down], vllm_base_urls=f"{busy.base_url}|sk-engine-secret,{down.base_url}")
        async with serving(settings) as client:
            await down.stop()
            state = client.app.state.gateway.engine_state
            await state.refresh()
            await state.scrape_all()
            body = (await client.get("/health")).json()
    # The Stack 2.9 fields stay as they were.
    assert body["status"] == "healthy" and body["model_loaded"] is True and body["model_path"] == "fake-model"
    first, second = body["engines"]
    assert first == {
        "url": busy.base_url, "ready": True, "ejected": False, "models": ["fake-model"], "max_model_len": 2048,
        "load": {"score": 7.0, "in_flight": 0, "running": 3.0, "waiting": 1.0, "kv_cache_usage": 0.0,
                 "prefix_cache_hits": 0.0, "prefix_cache_queries": 0.0},
        "last_error": None,
    }
    assert second["url"] == down.base_url and second["ready"] is False and second["last_error"] == "refused"
    text = str(body["engines"])
    assert "sk-engine-secret" not in str(body) and "Connection refused" not in text and "onnect" not in text


async def test_metrics_count_requests_errors_retries_continuations_and_decisions_per_engine():
    async with fake_fleet(2) as (flaky, steady):
        settings = fleet_settings([flaky, steady], routing_policy="round_robin", session_store="memory")
        async with serving(settings) as client:
            flaky.mode = "http_503"
            # Round robin: flaky (503, ejected) then steady; steady (the only one left).
            for i in range(2):
                assert (await client.post(CHAT, json=chat(i))).status_code == 200
            flaky.mode, flaky.die_after = "ok", 1
            flaky_engine = client.app.state.gateway.engine_state.fleet.get(flaky.base_url)
            flaky_engine.ejected_until = 0  # as after its ejection ran out
            assert (await client.post(CHAT, json=chat(3))).status_code == 200  # steady's turn
            # flaky's turn: it dies after one token; the stream continues on steady.
            stream = await client.post(CHAT, json=chat(9, stream=True, temperature=0, max_tokens=4))
            assert stream.text.rstrip().endswith("data: [DONE]")
            text = (await client.get("/metrics")).text
    lines = set(text.splitlines())
    assert f'gateway_engine_requests_total{{engine="{flaky.base_url}"}} 2.0' in lines
    assert f'gateway_engine_requests_total{{engine="{steady.base_url}"}} 4.0' in lines
    assert f'gateway_engine_errors_total{{engine="{flaky.base_url}",kind="http_503"}} 1.0' in lines
    assert f'gateway_engine_retries_total{{engine="{flaky.base_url}"}} 1.0' in lines
    assert f'gateway_engine_continuations_total{{engine="{steady.base_url}",outcome="continued"}} 1.0' in lines
    assert 'gateway_routing_decisions_total{policy="round_robin",reason="round_robin"} 6.0' in lines
    died = [line for line in lines if line.startswith(f'gateway_engine_errors_total{{engine="{flaky.base_url}"')
            and "http_503" not in line]
    assert died == [f'gateway_engine_errors_total{{engine="{flaky.base_url}",kind="bad_response"}} 1.0']
    assert f'gateway_engine_up{{engine="{steady.base_url}"}} 1.0' in lines
    assert f'gateway_engine_up{{engine="{flaky.base_url}"}} 0.0' in lines  # ejected again: it died mid-stream


async def test_readiness_answers_at_once_while_one_engine_hangs_and_another_serves():
    """One engine of two hangs (it accepts connections and never answers: its look runs into LOOK_TIMEOUT,
    10 s). /readyz and /health answered only after waiting 2 s for that look, on every call once the last
    look was a second old: past a Kubernetes probe's default timeout (1 s), so every gateway replica of the
    fleet read unready because of one hung engine. They answer once the serving engine's look is in."""
    async with fake_fleet(2) as (hung, serving_engine), serving(fleet_settings([hung, serving_engine])) as client:
        state = client.app.state.gateway.engine_state
        hung.models_delay = 3600
        for path in ("/readyz", "/health", "/readyz"):
            state.checked_at = 0.0  # the last look is stale: this call starts a new one (the hung one's goes on)
            started = time.monotonic()
            answer = await client.get(path)
            elapsed = time.monotonic() - started
            assert answer.status_code == 200 and answer.json()["ready"] is True
            assert elapsed < 1.0, f"{path} took {elapsed:.2f} s"


async def test_a_model_whose_only_engine_hangs_keeps_its_own_card_in_the_listing():
    """The engine serving ``long-model`` hangs (still ready: its looks have not timed out yet). /v1/models listed
    it with another model's card: as an alias of the default model (``parent``) with that model's context
    length, which clients size their requests by. It keeps the card its engine's last look read; once that
    engine's look went unanswered, the listing no longer waits for it."""
    async with fake_fleet(2) as (short, long_):
        short.models, long_.models, long_.max_model_len = ["short-model"], ["long-model"], 32768
        async with serving(fleet_settings([short, long_])) as client:
            long_.models_delay = 3600
            for attempt in ("asked", "not asked"):
                started = time.monotonic()
                listing = (await client.get("/v1/models")).json()["data"]
                elapsed = time.monotonic() - started
                card = next(card for card in listing if card["id"] == "long-model")
                assert (card["parent"], card["max_model_len"]) == (None, 32768), attempt
                one = (await client.get("/v1/models/long-model")).json()
                assert (one["parent"], one["max_model_len"]) == (None, 32768), attempt
                engine = client.app.state.gateway.engine_state.fleet.get(long_.base_url)
                engine.timeouts_in_a_row = 1  # its look went unanswered (LOOK_TIMEOUT): it is not asked any more
            assert elapsed < 1.0, f"the listing waited {elapsed:.2f} s for an engine whose look went unanswered"


async def test_an_engine_unreachable_from_the_start_is_logged_once(caplog):
    """A fleet started with one engine down (a wrong address, a pod not up yet) logged nothing about it: the
    warning came only when a ready engine turned not ready. Its first look says so, once."""
    async with fake_fleet(2) as (down, up):
        await down.stop()
        with caplog.at_level("WARNING", logger="gateway.engine"):
            async with serving(fleet_settings([down, up])) as client:
                await client.app.state.gateway.engine_state.refresh()  # a second look: no second warning
        warnings = [record for record in caplog.records if record.getMessage() == "engine not ready"]
        assert [record.engine for record in warnings] == [down.base_url]


async def test_an_engine_whose_look_goes_unanswered_is_rested_at_once_not_after_three_looks(monkeypatch):
    """A hung engine (it accepts connections and never answers) stayed ready, and took its share of new
    requests, until its third look in a row timed out (LOOK_TIMEOUT, 10 s, every ENGINE_POLL_INTERVAL:
    about 30 s, every such request waiting UPSTREAM_FIRST_BYTE_TIMEOUT). The first unanswered look rests
    it as a failed request does: still ready (it may only be busy), new requests go to the other engine."""
    monkeypatch.setattr("gateway.engines.state.LOOK_TIMEOUT", 0.2)
    async with fake_fleet(2) as (hung, steady), serving(fleet_settings([hung, steady])) as client:
        state = client.app.state.gateway.engine_state
        hung.models_delay = 3600
        await state.refresh()
        answers = [await client.post(CHAT, json=chat(i)) for i in range(8)]
        body = (await client.get("/health")).json()
    assert [answer.status_code for answer in answers] == [200] * 8
    assert (hung.requests, steady.requests) == (0, 8)
    assert [(entry["ready"], entry["ejected"]) for entry in body["engines"]] == [(True, True), (True, False)]


async def test_an_only_engine_whose_look_goes_unanswered_still_takes_requests(monkeypatch):
    monkeypatch.setattr("gateway.engines.state.LOOK_TIMEOUT", 0.2)
    async with fake_fleet(1) as (slow,), serving(fleet_settings([slow])) as client:
        state = client.app.state.gateway.engine_state
        slow.models_delay = 3600
        await state.refresh()
        answer = await client.post(CHAT, json=chat(0))
        body = (await client.get("/health")).json()
    assert answer.status_code == 200 and slow.requests == 1
    assert [(entry["ready"], entry["ejected"]) for entry in body["engines"]] == [(True, True)]
