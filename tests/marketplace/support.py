"""Fixtures and helpers for the marketplace tests, shared by the SQLite and PostgreSQL runs.

Test modules import the fixtures they use from here. ``database_url`` is a
fresh SQLite file per test; the PostgreSQL run (the `*_postgres.py` modules beside this one)
re-collects the same test functions with ``database_url`` bound to a fresh
PostgreSQL database instead. The app is the real gateway (``create_app``) with
its API keys, error handlers and middleware, talking to a fake vLLM that
records every request it receives.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import httpx
import pytest
from aiohttp import web

from gateway.app import create_app
from gateway.config import Settings
from tests.support.fake_engine import FakeEngine, Received

READ_KEY = "sk-market-read-0123456789"
APP_KEY = "sk-market-app-a-1357924680"
OTHER_APP_KEY = "sk-market-app-b-2468013579"
WRITE_KEY = "sk-market-write-9876543210"
READ = {"Authorization": f"Bearer {READ_KEY}"}
APP = {"Authorization": f"Bearer {APP_KEY}"}  # a marketplace backend acting for its users
OTHER_APP = {"Authorization": f"Bearer {OTHER_APP_KEY}"}  # another application: sees none of APP's users
WRITE = {"Authorization": f"Bearer {WRITE_KEY}"}

JAKARTA = (-6.2088, 106.8456)


@pytest.fixture
def database_url(tmp_path) -> str:
    return f"sqlite+aiosqlite:///{tmp_path}/marketplace.db"


@pytest.fixture
async def fake_engine() -> AsyncIterator[FakeEngine]:
    engine = await FakeEngine(models=["fake-qwen"]).start()
    yield engine
    await engine.stop()


def make_settings(*, database_url: str, vllm_base_url: str, **overrides) -> Settings:
    values = dict(
        vllm_base_url=vllm_base_url,
        database_url=database_url,
        api_keys=[READ_KEY],
        app_api_keys=[APP_KEY, OTHER_APP_KEY],
        admin_api_keys=[WRITE_KEY],
        session_store="off",
        access_log=False,
        engine_poll_interval=60,
        default_max_tokens=8,
        default_temperature=0.0,
    )
    values.update(overrides)
    return Settings(**values)


@pytest.fixture
def settings(database_url, fake_engine) -> Settings:
    return make_settings(database_url=database_url, vllm_base_url=fake_engine.base_url)


@contextlib.asynccontextmanager
async def running_app(settings: Settings, **app_options) -> AsyncIterator[httpx.AsyncClient]:
    """The gateway with its lifespan running (migrations, seed, gazetteer), behind an httpx client.

    ``app_options`` go to ``create_app`` (e.g. ``features=`` with the marketplace's own settings).
    """
    app = create_app(settings, **app_options)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost", timeout=60) as client:
            client.app = app  # type: ignore[attr-defined]
            yield client


@pytest.fixture
async def client(settings) -> AsyncIterator[httpx.AsyncClient]:
    """An unauthenticated client: pass ``headers=READ``, ``APP`` or ``WRITE``."""
    async with running_app(settings) as client:
        yield client


# --- building a catalogue through the API ------------------------------------------------------


async def add_supplier(client: httpx.AsyncClient, *, lat: float, lng: float, name: str = "Toko Uji", **extra) -> dict:
    body = {"name": name, "business_name": f"CV {name}", "location": {"lat": lat, "lng": lng},
            "address": "Jl. Uji No. 1", "contact": "+62 811-0000-0000", **extra}
    response = await client.post("/api/suppliers/register", json=body, headers=WRITE)
    assert response.status_code == 201, response.text
    return response.json()


async def add_product(client: httpx.AsyncClient, *, supplier_id: int, name: str, price: int = 100_000,
                      stock_quantity: int = 5, category: str = "elektronik", **extra) -> dict:
    body = {"supplier_id": supplier_id, "name": name, "price": price, "stock_quantity": stock_quantity,
            "category": category, **extra}
    response = await client.post("/api/products", json=body, headers=WRITE)
    assert response.status_code == 201, response.text
    return response.json()


async def add_user(client: httpx.AsyncClient, *, email: str = "ani@example.com", ai: bool = True,
                   location: dict | None = None, headers: dict = APP, **extra) -> dict:
    """A user registered by the app key ``headers`` names (APP by default), which then owns it."""
    body = {"name": "Ani", "email": email, "ai_access_enabled": ai, **extra}
    if location is not None:
        body["location"] = location
    response = await client.post("/api/users", json=body, headers=headers)
    assert response.status_code == 201, response.text
    return response.json()


async def count_rows(client: httpx.AsyncClient, table: str) -> int:
    """Rows in a marketplace table, read straight from the app's database."""
    from sqlalchemy import text

    async with client.app.state.marketplace.db_factory() as db:  # type: ignore[attr-defined]
        return int(await db.scalar(text(f"SELECT count(*) FROM {table}")))


def field_of(response: httpx.Response) -> list[str]:
    """The field names a 422 response's detail points at."""
    detail = response.json()["detail"]
    assert isinstance(detail, list), detail
    return [str(error["loc"][-1]) for error in detail]


# --- a fake engine that answers the AI search's structured-output requests ------------------------


class ScriptedEngine(FakeEngine):
    """The fake vLLM, answering non-streamed chat completions with ``answer`` as the message.

    ``answer`` None: the plain fake's "tok tok ..." (not JSON). ``finish_reason`` "length"
    stands for an answer cut off at max_tokens. ``mode``, ``response_delay`` and the
    recording of requests work as in FakeEngine.
    """

    answer: str | None = None
    finish_reason: str = "stop"

    async def _complete(self, request):
        if self.answer is None or self.mode != "ok":
            return await super()._complete(request)
        body = await request.read()
        self.received.append(Received(request.path, {k.lower(): v for k, v in request.headers.items()}, body))
        if self.response_delay:
            await asyncio.sleep(self.response_delay)
        return web.json_response({
            "id": "chatcmpl-scripted", "object": "chat.completion", "created": 0, "model": self.models[0],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": self.answer},
                         "finish_reason": self.finish_reason}],
            "usage": {"prompt_tokens": 900, "completion_tokens": 60, "total_tokens": 960},
        })


@pytest.fixture
async def scripted_engine() -> AsyncIterator[ScriptedEngine]:
    engine = await ScriptedEngine(models=["fake-qwen"]).start()
    yield engine
    await engine.stop()


@pytest.fixture
async def ai_client(database_url, scripted_engine) -> AsyncIterator[httpx.AsyncClient]:
    """The gateway in front of the scripted engine; its marketplace settings are ``app.state.marketplace.settings``."""
    async with running_app(make_settings(database_url=database_url, vllm_base_url=scripted_engine.base_url)) as client:
        yield client
