"""The app a served process runs: the one whose start-up freezes the heap (``gateway.serving``)."""

from __future__ import annotations

import gc

import pytest
import uvicorn.importer

import gateway.cli
from gateway.app import create_app, create_served_app
from gateway.config import Settings


@pytest.fixture
def unfrozen():
    gc.unfreeze()
    yield
    gc.unfreeze()  # what a test froze goes back to the collector


def offline_settings(tmp_path) -> Settings:
    return Settings(vllm_base_url="http://127.0.0.1:9", session_store="off", features=[],
                    database_url=f"sqlite+aiosqlite:///{tmp_path}/db.sqlite")


async def test_a_served_app_freezes_what_start_up_left_alive(tmp_path, unfrozen):
    app = create_app(offline_settings(tmp_path), freeze_heap_when_started=True)
    async with app.router.lifespan_context(app):
        assert gc.get_freeze_count() > 1000
        # The app and everything it holds are out of the collector's generations: no collection walks them.
        assert not any(obj is app for obj in gc.get_objects())


async def test_an_app_built_by_a_test_leaves_the_heap_alone(tmp_path, unfrozen):
    app = create_app(offline_settings(tmp_path))
    async with app.router.lifespan_context(app):
        assert gc.get_freeze_count() == 0


def test_the_cli_serves_the_app_that_freezes_its_heap(monkeypatch, tmp_path):
    monkeypatch.setenv("DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path}/db.sqlite")
    built = []

    def recording_create_app(settings, **options):
        built.append((create_app(settings, **options), options))
        return built[-1][0]

    monkeypatch.setattr(gateway.cli, "create_app", recording_create_app)
    served = {}
    monkeypatch.setattr(gateway.cli.uvicorn, "run", lambda app, **options: served.update(app=app, **options))
    gateway.cli.main()  # one worker: the app built (and checked) here is the one served
    [(app, options)] = built
    assert served["app"] is app and served["factory"] is False and options == {"freeze_heap_when_started": True}
    monkeypatch.setenv("WORKERS", "2")
    gateway.cli.main()  # several: each worker builds its own, through the factory
    assert served["factory"] is True
    assert uvicorn.importer.import_from_string(served["app"]) is create_served_app
