"""What the new routes decide before the engine is asked (a fake engine that serves models, nothing else)."""

from __future__ import annotations

import pytest

from tests.support.gateway import serving


@pytest.fixture
async def plain_client(make_settings):
    async with serving(make_settings(session_store="off")) as client:
        yield client


async def test_background_needs_sessions(plain_client):
    answer = await plain_client.post("/v1/responses", json={"input": "hi", "background": True})
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "background"
    assert "SESSION_STORE=off" in answer.json()["error"]["message"]


async def test_refused_routes_are_404_for_every_method_and_kept_out_of_the_openapi_document(plain_client):
    for method in ("GET", "POST", "PUT", "DELETE"):
        answer = await plain_client.request(method, "/collective_rpc")
        assert answer.status_code == 404 and answer.json()["error"]["code"] == "route_not_exposed"
    paths = (await plain_client.get("/openapi.json")).json()["paths"]
    assert "/collective_rpc" not in paths and "/v1/responses" in paths and "/tokenize" in paths


async def test_wrong_method_on_a_relayed_route_is_a_405_in_its_shape(plain_client):
    answer = await plain_client.get("/v1/messages")
    assert answer.status_code == 405 and answer.json()["type"] == "error"
    assert answer.json()["error"]["type"] == "invalid_request_error"
