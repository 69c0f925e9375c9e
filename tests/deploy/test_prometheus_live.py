"""A real Prometheus, configured from deploy/prometheus/prometheus.yml and rules.yml, scrapes a
real gateway in front of the real engine, and the engine itself, while the test sends traffic:
every recording rule and every query of the dashboard (read from its JSON) returns data through
Prometheus's HTTP API, every rule evaluates without error, and when the engine vanishes the
alerts that should start pending do.

Scrapes and rule evaluations every second (the shipped 15 s replaced), so data arrive within
seconds; every wait is an outcome polled against a deadline. "Returns data" means at least one
sample whose value is a number: a NaN (a quantile of no observations, a ratio of nothing) does
not count. Grafana's ``$__rate_interval`` becomes ``1m``, a window that spans the whole test.

A key at its cap of two generations gets a 429; then traffic comes in rounds (streamed chat,
completion and Anthropic messages, a non-streamed chat, the model list, a refused key) until
every query that normal traffic feeds has data; then the engine vanishes behind a TCP proxy in the middle of a resumable
stream (the gateway finds no engine to continue it on) and requests get 503 until the error
queries have data too.
"""

from __future__ import annotations

import asyncio
import time
from urllib.parse import urlsplit

import httpx
import yaml

from gateway.app import create_app
from gateway.config import Settings
from tests.support.deploy import (
    RULES,
    SCRAPE_CONFIG,
    as_grafana_sends,
    metric_names,
    panel_queries,
    recording_rules,
)
from tests.support.prometheus import finite
from tests.support.servers import run_uvicorn
from tests.support.tcp_proxy import TcpProxy
from tests.support.waiting import until

KEY = "sk-observability-key-0123456789"
CAPPED_KEY = "sk-observability-capped-9876543210"
SCRAPE_KEY = "sk-observability-scrape-5555555555"  # METRICS_API_KEYS: Prometheus's own, /metrics only
RATE_INTERVAL = "1m"
ROUNDS_DEADLINE = 240.0   # seconds of traffic rounds for the data of normal traffic
OUTAGE_DEADLINE = 120.0
QUERY_EVERY = 1.0         # Prometheus evaluates every second: no point asking more often
# Series the gateway creates with their first event, which only failures produce.
FAILURE_FED = ("gateway_upstream_errors_total", "gateway_engine_errors_total", "gateway_engine_continuations_total")


def host_port(url: str) -> str:
    return urlsplit(url).netloc


def scrape_config(gateway_url: str, engine_url: str, key_file) -> dict:
    """The shipped example, pointed at this test's gateway and engine, scraping every second."""
    config = yaml.safe_load(SCRAPE_CONFIG.read_text())
    config["global"] = {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"}
    config["rule_files"] = [str(RULES)]
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    jobs["stack-gateway"]["authorization"]["credentials_file"] = str(key_file)
    jobs["stack-gateway"]["static_configs"] = [{"targets": [host_port(gateway_url)]}]
    jobs["vllm"]["static_configs"] = [{"targets": [host_port(engine_url)]}]
    return config


def queries() -> tuple[dict[str, str], set[str]]:
    """Every query under test, named (each recording rule's series, each dashboard target), and
    the names of those only failures feed."""
    named: dict[str, str] = {}
    failure_fed: set[str] = set()
    sources = [(f"rule {rule['record']}", rule["record"], rule["expr"]) for rule in recording_rules()]
    sources += [(f"panel {query.panel!r} {query.ref}", as_grafana_sends(query.expr, RATE_INTERVAL), query.expr)
                for query in panel_queries()]
    for name, expr, source in sources:
        named[name] = expr
        if metric_names(source) & set(FAILURE_FED):
            failure_fed.add(name)
    return named, failure_fed


async def without_data(server, pending: dict[str, str]) -> dict[str, str]:
    """The queries of ``pending`` that do not return a number yet."""
    answers = await asyncio.gather(*(server.query(expr) for expr in pending.values()))
    return {name: expr for (name, expr), samples in zip(pending.items(), answers, strict=True) if not finite(samples)}


async def one_round(client: httpx.AsyncClient, model: str) -> None:
    chat = {"model": model, "messages": [{"role": "user", "content": "Name a lighthouse."}], "max_tokens": 8,
            "temperature": 0}
    for path, body in [
        ("/v1/chat/completions", {**chat, "stream": True}),
        ("/v1/completions", {"model": model, "prompt": "A lighthouse", "max_tokens": 8, "stream": True}),
        ("/v1/messages", {"model": model, "max_tokens": 8, "stream": True,
                          "messages": [{"role": "user", "content": "Name a lighthouse."}]}),
    ]:
        async with client.stream("POST", path, json=body) as response:
            assert response.status_code == 200, await response.aread()
            await response.aread()
    assert (await client.post("/v1/chat/completions", json=chat)).status_code == 200
    assert (await client.get("/v1/models")).status_code == 200
    assert (await client.get("/v1/models", headers={"Authorization": "Bearer sk-wrong"})).status_code == 401


async def refuse_at_the_cap(client: httpx.AsyncClient, model: str) -> None:
    """Both of ``CAPPED_KEY``'s slots held by generations: its next request gets 429; then both are cancelled.

    (A key of its own: a resumable generation holds its slot until it ends, whether or not its
    client reads, so the key's slots are not free the instant its streams are.)
    """
    capped = {"Authorization": f"Bearer {CAPPED_KEY}"}
    body = {"model": model, "messages": [{"role": "user", "content": "A long story."}], "stream": True,
            "max_tokens": 4000, "ignore_eos": True}
    async with client.stream("POST", "/v1/chat/completions", json=body, headers=capped) as first, \
            client.stream("POST", "/v1/chat/completions", json=body, headers=capped) as second:
        assert (first.status_code, second.status_code) == (200, 200)
        assert (await client.get("/v1/models", headers=capped)).status_code == 429
        for response in (first, second):  # cancel is a control request: admitted at the cap
            session_id = response.headers["x-session-id"]
            cancelled = await client.post(f"/v1/cancel/{session_id}", headers=capped)
            assert cancelled.status_code == 200, cancelled.text
            await response.aread()


async def test_every_rule_and_dashboard_query_returns_data_from_a_real_prometheus(vllm_engine, prometheus,
                                                                                   tmp_path):
    engine_address = urlsplit(vllm_engine.base_url)
    proxy = TcpProxy(engine_address.hostname, engine_address.port)
    proxy.start()
    settings = Settings(
        vllm_base_url=proxy.url, vllm_api_key=vllm_engine.api_key, api_keys=[KEY, CAPPED_KEY], metrics_api_keys=[SCRAPE_KEY],
        database_url=f"sqlite+aiosqlite:///{tmp_path}/gateway.db", session_store="sqlite",
        max_inflight_per_key=2, access_log=False, engine_poll_interval=1, features=["none"])
    # Flow control on (the default), or its queue's panels get no data. At the per-key cap a
    # generation would wait, but a request that is no generation (a model list) is still
    # refused at once: refuse_at_the_cap feeds the admission refusals with one.
    key_file = tmp_path / "scrape.key"
    key_file.write_text(SCRAPE_KEY)
    try:
        with run_uvicorn(create_app(settings)) as gateway_url:
            server = await prometheus.start(scrape_config(gateway_url, vllm_engine.base_url, key_file))

            async def both_targets_up() -> bool:
                targets = await server.targets()
                return sorted((t["labels"]["job"], t["health"]) for t in targets) == [
                    ("stack-gateway", "up"), ("vllm", "up")]

            await until(both_targets_up, 60, what="Prometheus scraping the gateway and the engine", interval=0.2)
            rules = await server.rules()
            assert {rule["name"] for rule in rules if rule["type"] == "recording"} == \
                {rule["record"] for rule in recording_rules()}

            pending, failure_fed = queries()
            async with httpx.AsyncClient(base_url=gateway_url, timeout=120,
                                         headers={"Authorization": f"Bearer {KEY}"}) as client:
                # Normal traffic, in rounds, until what it feeds has data.
                await refuse_at_the_cap(client, vllm_engine.model)
                deadline = time.monotonic() + ROUNDS_DEADLINE
                while True:
                    await one_round(client, vllm_engine.model)
                    pending = await without_data(server, pending)
                    if set(pending) <= failure_fed or time.monotonic() > deadline:
                        break
                assert set(pending) <= failure_fed, \
                    f"no data after {ROUNDS_DEADLINE:.0f}s of traffic: {sorted(set(pending) - failure_fed)}"

                # The engine vanishes in the middle of a resumable stream: no engine can continue it.
                # (7,000 tokens: the embedded model writes thousands a second; the stream must still run.)
                body = {"model": vllm_engine.model, "messages": [{"role": "user", "content": "A long story."}],
                        "max_tokens": 7000, "ignore_eos": True, "temperature": 0, "stream": True}
                async with client.stream("POST", "/v1/chat/completions", json=body) as response:
                    assert response.status_code == 200
                    chunks = response.aiter_bytes()
                    received = [await anext(chunks)]
                    proxy.stop()
                    received += [chunk async for chunk in chunks]
                assert b"stream_interrupted" in b"".join(received)  # the stream's explicit error ending

                async def failures_have_data() -> bool:
                    nonlocal pending
                    chat = await client.post("/v1/chat/completions", json={**body, "stream": False, "max_tokens": 4})
                    assert chat.status_code in (502, 503), chat.text
                    pending = await without_data(server, pending)
                    return not pending

                try:
                    await until(failures_have_data, OUTAGE_DEADLINE, what="data of the outage", interval=QUERY_EVERY)
                except AssertionError as exc:
                    raise AssertionError(f"no data even after the outage: {sorted(pending)}") from exc

                # Every rule evaluates cleanly on real series; the outage's alerts are on their way.
                async def outage_alerts_pending() -> bool:
                    alerts = (await server.api("alerts"))["alerts"]
                    states = {(a["labels"]["alertname"], a["labels"].get("model") or a["labels"].get("engine"))
                              for a in alerts if a["state"] in ("pending", "firing")}
                    return {("GatewayNoReadyEngineForModel", vllm_engine.model),
                            ("GatewayEngineDown", proxy.url)} <= states

                await until(outage_alerts_pending, 30, what="the outage's alerts pending", interval=QUERY_EVERY)
                unhealthy = [(rule["name"], rule.get("lastError")) for rule in await server.rules()
                             if rule["health"] != "ok"]
                assert unhealthy == []
    finally:
        proxy.shutdown()
