"""Guard: a request body the gateway parses itself costs time linear in its size, up to the body limit.

The gateway serves every request on one event loop, so one body whose parsing takes quadratic
or worse time stops every stream, ``/health`` and the session heartbeat of the replica (issue
29: a regex over multipart bodies took 1.7 s at 14.8 KB and would take hours at the 4 MB
limit). The marketplace's twin is tests/marketplace/test_linear_patterns.py.

Each worst-case shape is sent through the app at growing sizes up to ``MAX_BODY_BYTES``, and the
CPU time of this process bounded with a wide margin (other work on the machine does not count):
the linear parser takes about 10 ms at the limit; the regex took seconds already at the
smallest size here, so the small sizes fail first and the large ones never have to hang. The
last test runs the gateway as its own process and asks ``/health`` beside the body at the limit.

``test_every_route_that_parses_a_body_itself_is_guarded`` fails when a route starts parsing a
body format of its own: add its shapes here.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from gateway.protocols.engine_api.multipart import MAX_DISPOSITION_PARAMETERS, MAX_HEADERS, MAX_PARTS
from gateway.protocols.engine_api.routes import MULTIPART_PATHS
from tests.support.gateway import serving
from tests.support.gateway_process import GatewayProcess

LIMIT = 4 * 1024 * 1024  # MAX_BODY_BYTES by default
SIZES = [16 * 1024, 256 * 1024, LIMIT]
CPU_SECONDS = 1.0  # per request, at any size; linear parsing takes ~0.01 s at the limit
BOUNDARY = "B"
CONTENT_TYPE = f"multipart/form-data; boundary={BOUNDARY}"
GUARDED_MULTIPART = {"/v1/audio/transcriptions", "/v1/audio/translations"}


def test_every_route_that_parses_a_body_itself_is_guarded():
    assert set(MULTIPART_PATHS) == GUARDED_MULTIPART, "a multipart route was added or removed: guard it here"


def repeated(unit: bytes, size: int, *, lead: bytes = b"", tail: bytes = b"") -> bytes:
    return lead + unit * ((size - len(lead) - len(tail)) // len(unit)) + tail


FILE = b'--B\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n\r\n'
MODEL = b'--B\r\nContent-Disposition: form-data; name="model"\r\n\r\nfake-model\r\n'
SHAPES = {
    # the report's body: one header line after another, never the blank line that ends them
    "repeated model dispositions": lambda n: repeated(b"--B\r\ncontent-disposition:name=model\r\n", n),
    "repeated model dispositions, then a blank line": lambda n: repeated(
        b"--B\r\ncontent-disposition:name=model\r\n", n, tail=b"\r\n"),
    "repeated form-data dispositions": lambda n: repeated(
        b'--B\r\nContent-Disposition: form-data; name="model"\r\n', n, tail=b"\r\n"),
    "empty parts": lambda n: repeated(b"--B\r\n\r\n\r\n", n, tail=b"--B--\r\n"),
    "model parts": lambda n: repeated(MODEL, n, tail=b"--B--\r\n"),
    "a file of carriage returns": lambda n: repeated(b"\r", n, lead=MODEL + FILE, tail=b"\r\n--B--\r\n"),
    "a file of near delimiters": lambda n: repeated(b"\r\n--", n, lead=MODEL + FILE, tail=b"\r\n--B--\r\n"),
    "a file of delimiters without their line end": lambda n: repeated(
        b"\r\n--B-", n, lead=MODEL + FILE, tail=b"\r\n--B--\r\n"),
    "one header line": lambda n: repeated(b"a", n, lead=b"--B\r\nx-long: ", tail=b"\r\n\r\n\r\n--B--\r\n"),
    "one header name": lambda n: repeated(b"a", n, lead=b"--B\r\n", tail=b": x\r\n\r\n\r\n--B--\r\n"),
    "dispositions with many parameters": lambda n: repeated(
        b'--B\r\nContent-Disposition: form-data; name="model"' + b';a="model"' * 30 + b"\r\n\r\nx\r\n", n),
    "a long boundary line": lambda n: repeated(b"-", n, lead=b"--B"),
    "padding after a delimiter": lambda n: repeated(b" ", n, lead=MODEL + b"--B", tail=b"\r\n\r\n\r\n--B--\r\n"),
    "padded delimiters": lambda n: repeated(b"\r\n--B" + b" " * 60 + b"\r\n\r\n", n, lead=MODEL[:-2]),
    "many header lines": lambda n: repeated(b"a:b\r\n", n, lead=b"--B\r\n"),
    "parts of many header lines": lambda n: repeated(b"--B\r\n" + b"a:b\r\n" * 15 + b"\r\n\r\n", n),
    "parts of many parameters": lambda n: repeated(
        b'--B\r\nContent-Disposition: form-data; name="file"' + b";model" * 32 + b"\r\n\r\n\r\n", n),
    "line ends only": lambda n: repeated(b"\r\n", n),
    "as many parts, headers and parameters as allowed": lambda n: at_every_bound(n),
}


def at_every_bound(size: int) -> bytes:
    """MAX_PARTS parts, each with MAX_HEADERS headers and a disposition of MAX_DISPOSITION_PARAMETERS."""
    head = (b"--B\r\n" + b"x-a: b\r\n" * (MAX_HEADERS - 1) + b'Content-Disposition: form-data; name="f"'
            + b";a=model" * (MAX_DISPOSITION_PARAMETERS - 1) + b"\r\n\r\n")
    per_part = size // MAX_PARTS
    part = head + b"\r" * max(0, per_part - len(head) - 2) + b"\r\n"
    return part * (MAX_PARTS - 1) + b"--B--\r\n"


@pytest.fixture
async def gateway(make_settings):
    async with serving(make_settings()) as client:
        yield client


async def cpu_seconds_of_post(gateway, path: str, body: bytes) -> tuple[float, httpx.Response]:
    """CPU seconds of this process for one request through the app (parsed on this thread, so the
    test's timeout can stop it); one over the bound is tried again and its faster run kept (other
    work can only add time, never remove it)."""
    best, answer = float("inf"), None
    for _ in range(2):
        started = time.process_time()
        answer = await gateway.post(path, content=body, headers={"content-type": CONTENT_TYPE})
        best = min(best, time.process_time() - started)
        if best <= CPU_SECONDS:
            break
    return best, answer


@pytest.mark.parametrize("size", SIZES, ids=lambda size: f"{size // 1024}KB")
@pytest.mark.parametrize("path", sorted(GUARDED_MULTIPART))
async def test_multipart_shapes_cost_linear_time(gateway, path, size):
    slow = {}
    for name, shape in SHAPES.items():
        body = shape(size)
        assert len(body) <= LIMIT
        seconds, answer = await cpu_seconds_of_post(gateway, path, body)
        assert answer.status_code in (200, 400), (name, answer.text[:300])  # relayed, or refused: never a 500
        if seconds > CPU_SECONDS:
            slow[name] = round(seconds, 3)
    assert slow == {}


async def test_health_is_answered_beside_the_reports_body_at_the_limit(fake_engine, tmp_path):
    """The gateway as its own process: the body of the report at 4 MB is refused, and the one
    event loop answers ``/health`` beside it (it stopped for hours before the fix)."""
    body = SHAPES["repeated model dispositions"](LIMIT)
    gateway = await GatewayProcess(fake_engine, tmp_path / "gw.log", SESSION_STORE="off", FEATURES="none").start()
    try:
        # Timeouts only so that a frozen gateway fails the test instead of hanging it.
        async with httpx.AsyncClient(base_url=gateway.base_url, timeout=60) as client:
            upload = asyncio.create_task(client.post("/v1/audio/transcriptions", content=body,
                                                     headers={"content-type": CONTENT_TYPE}))
            beside = await client.get("/health")
            refused = await upload
            after = await client.get("/health")
    finally:
        await gateway.stop()
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "body"
    assert beside.status_code == after.status_code == 200
