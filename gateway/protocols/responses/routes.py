"""OpenAI's Responses API through the gateway: create, retrieve (or replay and follow), cancel, delete.

- ``POST /v1/responses``: one of three ways, all with a gateway-assigned id
  (``prepare``). Not streamed: relayed, the answer stored when ``store`` is not false.
  Streamed: relayed plainly event by event (a client that leaves aborts the engine), the
  final object stored before the terminal event reaches the client. ``background: true``:
  a run the gateway owns (``runs``), answered at once with the ``queued`` response, or with
  its live event stream when ``stream`` is true.
- ``GET /v1/responses/{id}``: the stored object, as its run stands now; with
  ``?stream=true`` (background responses), its events after ``starting_after`` (default:
  from the first), then live until the end. ``starting_after`` at the last event answers an
  empty stream at once; past it, a 400 (vLLM's own never answers).
- ``POST /v1/responses/{id}/cancel``: a background run stops (vLLM aborts the generation)
  and the response is ``cancelled``; cancelling again, or after the end, answers the
  response as it is.
- ``DELETE /v1/responses/{id}``: forgets it (a running one is cancelled first).

A response belongs to the API key that created it: any other key gets 404, for every route
and for ``previous_response_id``.

Retrieve, cancel and delete are control requests (``gateway.http.admission``): a key at its
in-flight cap can still look at and stop its background runs. Following a run's events
(``?stream=true``) holds a connection for as long as the run lasts, so that one takes a
request slot of its key like any stream.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from gateway.core import Core
from gateway.http.admission import too_many_requests
from gateway.http.body import read_body
from gateway.http.errors import OPENAI_SHAPE, GatewayError
from gateway.http.middleware import SERVER_SEND
from gateway.http.raw_routes import RawRoute
from gateway.protocols.common import table
from gateway.protocols.responses.dialect import ResponsesDialect, ResponsesRun
from gateway.protocols.responses.prepare import RESPONSES_PATH, ResponsesRequest, prepare, read_request
from gateway.protocols.responses.runs import BackgroundRuns, final_object
from gateway.relay.context import RelayContext, StreamCall
from gateway.relay.dialect import StreamResult
from gateway.relay.plain import PlainStreamResponse
from gateway.relay.sse import SSE_HEADERS
from gateway.relay.unary import RelayJSONResponse
from gateway.sessions.ids import ResumePoint
from gateway.sessions.manager import SessionManager
from gateway.sessions.store.base import ResponseRecords, StoredResponse

log = logging.getLogger("gateway.responses")

TAGS = ("OpenAI Responses",)
ONE = "/v1/responses/{response_id}"
CANCEL = "/v1/responses/{response_id}/cancel"
JSON = [(b"content-type", b"application/json")]


class ResponsesAPI:
    def __init__(self, core: Core, *, records: ResponseRecords, sessions: SessionManager | None) -> None:
        self.core = core
        self.records = records
        self.sessions = sessions
        self.runs = BackgroundRuns(core, sessions, records) if sessions is not None else None
        self.retention = core.settings.responses_retention_seconds

    # --- create -------------------------------------------------------------------------------
    async def create(self, scope: Scope, receive: Receive, send: Send) -> None:
        payload = read_request(await read_body(receive))
        engine_state = self.core.engine_state
        if not engine_state.served_models:  # never seen the engine yet: look before refusing
            await engine_state.refresh()
        ctx = self.core.relay_context(scope, error_shape=OPENAI_SHAPE)
        previous = await self._previous(ctx.key_id, payload.get("previous_response_id"))
        request = prepare(payload, engine=engine_state, previous=previous)
        if request.background:
            response = await self._background(request, scope, ctx)
        elif request.stream:
            response = self._stream(request, ctx)
        else:
            response = self._unary(request, ctx)
        await response(scope, receive, send)

    async def _previous(self, owner: str, response_id: str | None) -> StoredResponse | None:
        if response_id is None:
            return None
        record = await self._settled(await self.records.load_response(owner, response_id))
        if record is None:
            raise GatewayError(404, f"Previous response with id '{response_id}' not found.",
                               param="previous_response_id", code="response_not_found")
        if record.running:
            raise GatewayError(400, f"Previous response with id '{response_id}' is still {record.status}: wait "
                                    "until it completes", param="previous_response_id")
        return record

    def _unary(self, request: ResponsesRequest, ctx: RelayContext) -> Response:
        async def answered(body: bytes) -> bytes:
            response = orjson.loads(body)
            response.update(request.patch)
            usage = response.get("usage") or {}
            ctx.metrics.count_usage(ctx.key_id, {"prompt_tokens": usage.get("input_tokens"),
                                                 "completion_tokens": usage.get("output_tokens")})
            body = orjson.dumps(response)
            if request.store:
                await self._store(request, ctx.key_id, response.get("status"), body)
            return body

        return RelayJSONResponse("POST", RESPONSES_PATH, request.engine_body, ctx, count_usage=False,
                                 route=request.route, on_success=answered)

    def _stream(self, request: ResponsesRequest, ctx: RelayContext) -> Response:
        run = ResponsesRun(request.response_id, patch=request.patch)
        call = StreamCall(path=RESPONSES_PATH, body=request.engine_body, dialect=ResponsesDialect(run),
                          model=request.model, route=request.route)
        if not request.store:
            return PlainStreamResponse(call, ctx)
        stored = _StoredBeforeEnd(run, lambda final: self._store(request, ctx.key_id, final.get("status"),
                                                                 orjson.dumps(final)))

        async def finished(result: StreamResult) -> None:  # ended without its terminal event (left, broke)
            await stored.store_once(final_object(run, None, result))

        call.on_complete = finished
        stored.stream = PlainStreamResponse(call, ctx)
        return stored

    async def _store(self, request: ResponsesRequest, owner: str, status: object, body: bytes) -> None:
        """Keep a finished response; a store that fails costs its retrieval, not the answer."""
        try:
            await self.records.save_response(request.record(owner, self.retention, status=str(status), body=body))
        except Exception:
            log.exception("could not store a response", extra={"response_id": request.response_id})

    async def _background(self, request: ResponsesRequest, scope: Scope, ctx: RelayContext) -> Response:
        if self.runs is None:
            raise GatewayError(400, "background responses need resumable sessions, and this gateway runs with "
                                    "SESSION_STORE=off", param="background")
        run, _ = await self.runs.start(request, scope)
        if request.stream:
            return await self.sessions.resume(owner=ctx.key_id, point=ResumePoint(request.response_id, -1),
                                              keepalive_seconds=ctx.keepalive_seconds)
        created = await run.created
        if created is None:  # the run ended before the engine said anything: answer how it stands
            record = await self.records.load_response(ctx.key_id, request.response_id)
            return _json(record.body if record is not None else orjson.dumps(request.queued_object()))
        return _json(orjson.dumps({**created, "status": "queued"}))

    # --- retrieve, cancel, delete -----------------------------------------------------------------
    async def retrieve(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        owner = _owner(scope)
        record = await self._load(owner, scope["path_params"]["response_id"])
        stream = request.query_params.get("stream", "false").lower()
        if stream not in ("true", "false", "1", "0"):
            raise GatewayError(400, "'stream' must be true or false", param="stream")
        if stream not in ("true", "1"):
            await _json((await self._settled(record)).body)(scope, receive, send)
            return
        admission = self.core.admission
        refusal = admission.try_enter(owner)
        if refusal is not None:
            self.core.metrics.rejected.labels("admission").inc()
            raise too_many_requests(refusal)
        try:
            response = await self._replay(record, request.query_params.get("starting_after"))
            await response(scope, receive, send)
        finally:
            admission.leave(owner)

    async def _replay(self, record: StoredResponse, starting_after: str | None) -> Response:
        if not record.background or self.sessions is None:
            raise GatewayError(400, "only background responses can be streamed again (this one was created with "
                                    "\"background\": false)", param="stream")
        after = -1
        if starting_after is not None:
            if not starting_after.strip().isdigit() or len(starting_after.strip()) > 18:
                raise GatewayError(400, "'starting_after' must be a sequence number (an integer, 0 or more)",
                                   param="starting_after")
            after = int(starting_after)
        owner, response_id = record.owner, record.response_id
        try:
            state = await self.sessions.describe(owner=owner, session_id=response_id)
        except GatewayError as error:
            if error.status != 404:
                raise
            raise GatewayError(410, f"the events of response '{response_id}' are no longer kept "
                                    "(SESSIONS_TTL_SECONDS)", param="response_id", code="events_expired") from None
        if state["status"] != "live" and after >= state["events"] - 1:
            if after == state["events"] - 1:
                return _empty_stream()
            raise _past_end(after, state["events"])
        try:
            response = await self.sessions.resume(owner=owner, point=ResumePoint(response_id, after))
        except GatewayError as error:
            if error.param == "last_event_id":
                raise _past_end(after, None) from None
            raise
        if response.status_code == 204:  # it ended meanwhile, and the client has everything
            return _empty_stream()
        return response

    async def cancel(self, scope: Scope, receive: Receive, send: Send) -> None:
        owner = _owner(scope)
        record = await self._load(owner, scope["path_params"]["response_id"])
        if not record.background:
            raise GatewayError(400, "only background responses can be cancelled", param="response_id")
        record = await self._stop(record)
        await _json(record.body)(scope, receive, send)

    async def delete(self, scope: Scope, receive: Receive, send: Send) -> None:
        owner = _owner(scope)
        record = await self._stop(await self._load(owner, scope["path_params"]["response_id"]))
        await self.records.delete_response(owner, record.response_id)
        body = orjson.dumps({"id": record.response_id, "object": "response", "deleted": True})
        await _json(body)(scope, receive, send)

    async def _stop(self, record: StoredResponse) -> StoredResponse:
        """A running background response cancelled (idempotent: anything else is returned as it is)."""
        record = await self._settled(record)
        if not record.running or not record.background or self.sessions is None:
            return record
        try:
            await self.sessions.cancel(owner=record.owner, session_id=record.response_id)
        except GatewayError as error:
            if error.status != 404:
                raise
        reloaded = await self.records.load_response(record.owner, record.response_id)
        return await self._settled(reloaded) or record

    async def _load(self, owner: str, response_id: str) -> StoredResponse:
        record = await self.records.load_response(owner, response_id)
        if record is None:
            raise GatewayError(404, f"Response with id '{response_id}' not found.", param="response_id",
                               code="response_not_found")
        return record

    async def _settled(self, record: StoredResponse | None) -> StoredResponse | None:
        if record is None or self.runs is None:
            return record
        return await self.runs.settled(record)

    def routes(self) -> list[RawRoute]:
        handlers = {("POST", RESPONSES_PATH): self.create, ("GET", ONE): self.retrieve,
                    ("POST", CANCEL): self.cancel, ("DELETE", ONE): self.delete}
        return table.bind(table.rows("responses"), handlers, error_shape=OPENAI_SHAPE, tags=TAGS,
                          extra=lambda row: {"streams": row.method != "DELETE" and row.path != CANCEL,
                                             "control": row.path != RESPONSES_PATH,
                                             "request_schema": RESPONSES_SCHEMA if row.path == RESPONSES_PATH
                                             else None})


class _StoredBeforeEnd(Response):
    """A stream whose terminal event reaches the client only once the response it carries is stored.

    So a client that reads ``response.completed`` and retrieves the response at once finds it:
    the tracker has read the terminal event (``run.final``) before the body holding it is sent.
    """

    def __init__(self, run: ResponsesRun, store: Callable[[dict], Awaitable[None]]) -> None:
        self.run = run
        self._store = store
        self.pending = True
        self.stream: Response | None = None  # the relayed stream, set once built
        self.status_code = 200
        self.background = None

    async def store_once(self, final: dict) -> None:
        if self.pending:
            self.pending = False
            await self._store(final)

    def _storing_first(self, forward: Send) -> Send:
        async def send(message: dict) -> None:
            if self.pending and self.run.final is not None and message["type"] == "http.response.body":
                await self.store_once(self.run.final)
            await forward(message)

        return send

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # The relay sends body messages to the server's own send (SERVER_SEND), past every
        # wrapper: this one must see them, so it wraps that one too.
        scope[SERVER_SEND] = self._storing_first(scope.get(SERVER_SEND, send))
        await self.stream(scope, receive, self._storing_first(send))


def _owner(scope: Scope) -> str:
    """The key id of the caller: the owner of what it creates, the only one who sees it."""
    principal = scope["state"].get("principal")
    return principal.key_id if principal is not None else "-"


def _json(body: bytes) -> Response:
    return Response(body, status_code=200, media_type="application/json")


def _empty_stream() -> Response:
    """Nothing after ``starting_after``, and nothing more will come: a stream that ends at once."""
    return Response(b"", status_code=200, headers={k.decode(): v.decode() for k, v in SSE_HEADERS})


def _past_end(after: int, count: int | None) -> GatewayError:
    last = f": its last event is sequence_number {count - 1}" if count else ""
    return GatewayError(400, f"'starting_after' {after} is past the end of this response's events{last}",
                        param="starting_after")


RESPONSES_SCHEMA = {
    "type": "object",
    "required": ["input"],
    "additionalProperties": True,
    "description": "OpenAI's Responses request; every field vLLM accepts passes through unchanged, except "
                   "request_id (the gateway assigns ids), store and background (the gateway stores and runs them).",
    "properties": {
        "model": {"type": "string", "description": "a served model or one of its aliases"},
        "input": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "object"}}]},
        "instructions": {"type": "string"},
        "stream": {"type": "boolean", "default": False},
        "background": {"type": "boolean", "default": False},
        "store": {"type": "boolean", "default": True},
        "previous_response_id": {"type": "string"},
        "max_output_tokens": {"type": "integer", "minimum": 1},
        "temperature": {"type": "number", "minimum": 0},
        "user": {"type": "string"},
    },
}
