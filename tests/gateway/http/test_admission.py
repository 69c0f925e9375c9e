"""Admission control: a global and a per-key cap on requests in flight, and control requests in a pool of their own."""

from __future__ import annotations

import asyncio

import orjson

from gateway.app import create_app
from gateway.config import Settings
from gateway.http.admission import Admission, ControlRequests
from gateway.http.auth import KeyRing
from gateway.http.errors import OPENAI_SHAPE, ErrorShapes
from gateway.http.metrics import Metrics
from gateway.http.middleware import GatewayMiddleware
from tests.support.waiting import until

KEY = "sk-admission-test-key"


def test_admission_counts_and_releases():
    admission = Admission(max_inflight=3, max_inflight_per_key=2)
    assert admission.try_enter("a") is None and admission.try_enter("a") is None
    assert "this API key" in admission.try_enter("a")
    assert admission.try_enter("b") is None
    assert "the gateway" in admission.try_enter("c")
    admission.leave("a")
    assert admission.try_enter("c") is None
    for key in ("a", "b", "c"):
        admission.leave(key)
    assert admission.inflight == 0
    assert admission.try_enter("a") is None and admission.try_enter("a") is None  # a's whole cap is free again


def test_control_requests_match_their_method_and_template_only():
    control = ControlRequests([("POST", "/v1/cancel/{session_id}"), ("GET", "/v1/sessions/{session_id}"),
                               ("POST", "/v1/responses/{response_id}/cancel")])
    assert control.matches("POST", "/v1/cancel/s-1")
    assert control.matches("GET", "/v1/sessions/s-1")
    assert control.matches("POST", "/v1/responses/resp_1/cancel")
    assert not control.matches("GET", "/v1/sessions/s-1/events")  # following a session is a stream
    assert not control.matches("POST", "/v1/sessions/s-1")
    assert not control.matches("GET", "/v1/cancel/s-1")
    assert not control.matches("POST", "/v1/cancel/")
    assert not control.matches("POST", "/v1/cancel/a/b")
    assert not control.matches("POST", "/v1/chat/completions")
    assert not ControlRequests().matches("POST", "/v1/cancel/s-1")


class HeldApp:
    """An app whose every request waits until released: requests stay in flight as long as the test wants."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.entered = 0

    async def __call__(self, scope, receive, send) -> None:
        self.entered += 1
        await self.release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})


async def call(middleware, method: str, path: str) -> dict:
    """One request through the middleware: its status and body."""
    scope = {"type": "http", "method": method, "path": path, "query_string": b"",
             "headers": [(b"authorization", f"Bearer {KEY}".encode())]}
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    await middleware(scope, receive, send)
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return {"status": sent[0]["status"], "body": orjson.loads(body)}


async def test_control_requests_are_admitted_apart_and_bounded_by_their_own_pool():
    app = HeldApp()
    admission = Admission(max_inflight=10, max_inflight_per_key=1)
    shapes = ErrorShapes()
    shapes.register_prefix("/v1/", OPENAI_SHAPE)
    middleware = GatewayMiddleware(app, keyring=KeyRing(read_keys=[KEY], write_keys=[], secret=b"test-secret-0123456789"), admission=admission,
                                   metrics=Metrics(), error_shapes=shapes, max_body_bytes=1 << 20,
                                   metrics_require_auth=True, access_log=False,
                                   control_requests=ControlRequests([("POST", "/v1/cancel/{session_id}")]))
    held = [asyncio.create_task(call(middleware, "POST", "/v1/chat/completions")),  # takes the key's one slot
            asyncio.create_task(call(middleware, "POST", "/v1/cancel/s-1"))]        # admitted beside it
    await until(lambda: app.entered >= 2, what="both requests in the app")
    second_request = await call(middleware, "POST", "/v1/chat/completions")
    second_control = await call(middleware, "POST", "/v1/cancel/s-2")
    app.release.set()
    answers = await asyncio.gather(*held)
    assert [a["status"] for a in answers] == [200, 200]
    assert second_request["status"] == 429 and "1 requests in flight" in second_request["body"]["error"]["message"]
    assert second_control["status"] == 429  # the control pool has the same per-key size: bounded too
    assert admission.inflight == 0 and middleware.control_admission.inflight == 0


def test_the_app_declares_its_control_routes_once_and_documents_them():
    app = create_app(Settings(session_store="memory", features=["none"]))
    control = app.gateway_middleware["control_requests"]
    assert control.matches("POST", "/v1/cancel/s-1") and control.matches("GET", "/v1/sessions/s-1")
    assert control.matches("POST", "/v1/responses/resp_1/cancel") and control.matches("POST", "/responses/r/cancel")
    assert control.matches("GET", "/v1/responses/resp_1") and control.matches("DELETE", "/v1/responses/resp_1")
    for method, path in [("POST", "/v1/chat/completions"), ("POST", "/v1/responses"), ("POST", "/v1/messages"),
                         ("GET", "/v1/sessions/s-1/events"), ("POST", "/generate"), ("GET", "/v1/models")]:
        assert not control.matches(method, path), (method, path)
    paths = app.openapi()["paths"]
    assert paths["/v1/cancel/{session_id}"]["post"]["x-admission"] == "control"
    assert paths["/v1/responses/{response_id}/cancel"]["post"]["x-admission"] == "control"
    assert "x-admission" not in paths["/v1/chat/completions"]["post"]
