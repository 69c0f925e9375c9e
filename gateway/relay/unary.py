"""A non-streamed engine call relayed byte for byte, aborted when the client leaves.

The engine call runs in the request's own task; a disconnect cancels it (one watcher task
per request, no second task for the call), which closes the engine request so vLLM aborts
the generation instead of finishing it for nobody. The response starts only when the
engine has answered, so an engine error keeps its HTTP status.

A protocol that must read or change a successful answer before it goes out (store a
response object, count usage reported in its own field names) passes ``on_success``; one
that must tell the engine's error apart from what it seems (vLLM answers an output it cannot
convert with a 400, as if the request were wrong), or answer it another way (a count the
engine refused, taken from another route), passes ``on_error``; a body that is not JSON (a
multipart upload) passes its ``content_type``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import orjson

from gateway.engines.errors import EngineHTTPError, parse_error_body
from gateway.engines.routing import RouteHints
from gateway.failures import Failure
from gateway.http import queueing
from gateway.http.context import RequestContext
from gateway.http.disconnect import DisconnectWatcher
from gateway.http.errors import send_error
from gateway.relay.call import Relay, with_affinity
from gateway.relay.metering import admit_call, settle_call
from gateway.relay.refusals import count_failure, count_refusal
from gateway.tracing import hooks as tracing

JSON_HEADERS = [(b"content-type", b"application/json")]

# The engine's successful answer -> the body to send (may raise a Failure: nothing is sent yet).
SuccessHook = Callable[[bytes], Awaitable[bytes]]
# The engine's HTTP error -> the failure that answers it (the same one, or what it really is),
# or the body of a successful answer that replaces it.
ErrorHook = Callable[[EngineHTTPError], Awaitable[Failure | bytes]]
USAGE_MEMBER = b'"usage":{'
OPEN_BRACE, CLOSE_BRACE, COMMA = ord("{"), ord("}"), ord(",")


async def relay_json(request: RequestContext, relay: Relay, method: str, path: str, body: bytes | None, *,
                     count_usage: bool = True, route: RouteHints | None = None, content_type: str | None = None,
                     on_success: SuccessHook | None = None, on_error: ErrorHook | None = None) -> None:
    """Send ``body`` to the engine's ``path`` and answer ``request`` with what it answers."""
    try:
        body = await admit_call(request, relay.meter, path, body, stream=False,  # limits (a refusal raises)
                                routed_model=route.model if route is not None else None)
    except Failure as error:
        count_refusal(relay.metrics, error)
        raise
    try:
        await _relay(request, relay, method, path, body, count_usage=count_usage, route=route,
                     content_type=content_type, on_success=on_success, on_error=on_error)
    finally:
        await settle_call(request, answered=False)  # (a no-op once settled with the engine's usage)


async def _relay(request: RequestContext, relay: Relay, method: str, path: str, body: bytes | None, *,
                 count_usage: bool, route: RouteHints | None, content_type: str | None,
                 on_success: SuccessHook | None, on_error: ErrorHook | None) -> None:
    metrics = relay.metrics
    task = asyncio.current_task()
    watcher = DisconnectWatcher(request.receive, task.cancel).start()
    tracing.unary_started(request, path, body)
    try:
        status, answer = await queueing.request(relay.flow, relay.engines, request, method, path, body,
                                                route=with_affinity(route, request), content_type=content_type)
    except asyncio.CancelledError:
        if watcher.disconnected and task.uncancel() == 0:
            metrics.stream_ended("client_disconnect")
            return  # the client left: the engine request is closed, vLLM aborts
        raise
    except Failure as error:
        count_failure(metrics, error)  # (the queue's refusals are the gateway's, not the engine's)
        await settle_call(request, answered=False, failure=error)  # (no engine received it: its request too)
        await send_error(request.error_shape, error, request.send)
        return
    finally:
        watcher.stop()
    if watcher.disconnected:  # it left just as the engine answered: take back its cancel request
        while task.cancelling():
            task.uncancel()
        metrics.stream_ended("client_disconnect")
        return
    usage = _usage_of(answer) if status < 400 else None  # (decoded once, only its usage where that is certain)
    tracing.unary_answered(request, status, answer, path, route, metrics.genai, usage)
    if status >= 400:
        error: Failure | bytes = parse_error_body(status, answer)
        if on_error is not None:
            error = await on_error(error)
        if isinstance(error, bytes):  # answered another way
            status, answer = 200, error
        else:
            if status >= 500 or not isinstance(error, EngineHTTPError):
                metrics.upstream_errors.labels("engine_error").inc()
            await send_error(request.error_shape, error, request.send)
            return
    # Settled with the usage decoded above and the model the route asked for (the name vLLM
    # answers with): the answer is not parsed a second time.
    await settle_call(request, usage, model=route.model if route is not None else None)
    if count_usage and usage is not None:
        metrics.count_usage(request.key_id, usage)
    if on_success is not None:
        try:
            answer = await on_success(answer)
        except Failure as error:
            await send_error(request.error_shape, error, request.send)
            return
    await request.send({"type": "http.response.start", "status": status, "headers": JSON_HEADERS})
    # The body straight to the server once the head went out, as streams do.
    await request.server_send({"type": "http.response.body", "body": answer})



def _usage_of(answer: bytes) -> dict | None:
    """The usage object of a non-streamed answer, or None (none, or not JSON)."""
    if b'"usage"' not in answer:
        return None
    try:
        usage = answer_usage(answer)
    except (orjson.JSONDecodeError, AttributeError):
        return None
    return usage if isinstance(usage, dict) else None


def answer_usage(answer: bytes) -> object:
    """``orjson.loads(answer).get("usage")``, parsing only the usage object where that is certain.

    vLLM writes a chat or completion answer compactly with ``usage`` among its last members,
    only scalars after it. Such an answer's usage object is read alone (its whole text is not
    parsed: for a long answer, most of the work of relaying it): the object's member must open
    right after a comma or brace, and what follows it must close the top-level object and
    nothing else (no brace or bracket but that one closing brace). Any other answer is parsed
    whole, as before (the same exceptions for one that is not a JSON object).
    """
    at = answer.rfind(USAGE_MEMBER)
    if at > 0 and answer[at - 1] in (COMMA, OPEN_BRACE) and answer[:1] == b"{":
        start = at + len(USAGE_MEMBER) - 1
        end = answer.find(b"}", start)
        opened = answer.count(b"{", start + 1, end) if end > 0 else -1
        while opened > 0:  # a nested object (prompt_tokens_details): its closing brace too
            following = answer.find(b"}", end + 1)
            if following < 0:
                break
            opened += answer.count(b"{", end + 1, following) - 1
            end = following
        if opened == 0:
            tail = answer[end + 1:]
            if tail.count(b"}") == 1 and b"{" not in tail and b"[" not in tail and b"]" not in tail \
                    and tail.rstrip().endswith(b"}"):
                try:
                    usage = orjson.loads(answer[start:end + 1])
                except orjson.JSONDecodeError:
                    usage = None
                if isinstance(usage, dict):
                    return usage
    return orjson.loads(answer).get("usage")
