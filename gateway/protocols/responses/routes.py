"""OpenAI's Responses API through the gateway: create, retrieve (or replay and follow), cancel, delete.

- ``POST /v1/responses``: one of three ways, all with a gateway-assigned id
  (``prepare``). Not streamed: relayed, the answer stored when ``store`` is not false.
  Streamed: with sessions on, a session named by the response id (``runs``: event ids,
  resume, cancel, continuation on another engine; a client that leaves aborts the engine),
  without them relayed plainly; the final object stored before the terminal event reaches
  the client either way. ``background: true``: a run the gateway owns (``runs``), answered
  at once with the ``queued`` response, or with its live event stream when ``stream`` is
  true. The same POST with ``Last-Event-ID: <response_id>:<n>`` resumes a stream after
  event ``n`` from its session's log, without asking the engine again.
- ``GET /v1/responses/{id}``: the stored object, as its run stands now; with
  ``?stream=true`` (background or streamed responses), its events after ``starting_after``
  (default: from the first), then live until the end. ``starting_after`` at the last event
  answers an empty stream at once; past it, a 400 (vLLM's own never answers).
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

import asyncio
import contextlib
import logging

import orjson
from starlette.datastructures import QueryParams
from starlette.responses import Response

from gateway.core import Core
from gateway.engines.errors import EngineHTTPError
from gateway.failures import Failure, Gone, NotFound
from gateway.http.admission import too_many_requests
from gateway.http.body import read_body
from gateway.http.context import RequestContext
from gateway.http.errors import OPENAI_SHAPE, ErrorShape, GatewayError
from gateway.http.raw_routes import RawRoute
from gateway.protocols.common import budget, table
from gateway.protocols.common.sessions import asked_resume
from gateway.protocols.responses import chain, quota
from gateway.protocols.responses.continuation import continuation_for
from gateway.protocols.responses.dialect import ResponsesDialect, ResponsesRun, mark_cut_item
from gateway.protocols.responses.prepare import RESPONSES_PATH, ResponsesRequest, prepare, read_request
from gateway.protocols.responses.records.base import ResponseRecords, StoredResponse
from gateway.protocols.responses.runs import ClientLeft, ResponseRuns
from gateway.relay.call import StreamCall
from gateway.relay.continuation import Continuation
from gateway.relay.sse import SSE_HEADERS
from gateway.relay.unary import relay_json
from gateway.sessions.ids import ResumePoint, parse_position
from gateway.sessions.manager import SessionManager

log = logging.getLogger("gateway.responses")

TAGS = ("OpenAI Responses",)
ONE = "/v1/responses/{response_id}"
CANCEL = "/v1/responses/{response_id}/cancel"
JSON = [(b"content-type", b"application/json")]
EXPIRY_SECONDS = 60.0  # how often responses past RESPONSES_RETENTION_SECONDS are deleted


def _error_body(error: GatewayError) -> bytes:
    """OpenAI's envelope; the engine's refusal of an input past the context as OpenAI's own
    (``code: context_length_exceeded``, ``param: input``), which clients switch on (vLLM's has no
    code and names its ``input_tokens``). The gateway's estimate of the input cannot refuse it first."""
    cause = error.__cause__
    if isinstance(cause, EngineHTTPError) and budget.engine_too_long(cause) is not None:
        error = GatewayError(400, error.message, param="input", code="context_length_exceeded")
    return OPENAI_SHAPE.body(error)


RESPONSES_SHAPE = ErrorShape("openai", _error_body, validation_is_400=True)


class ResponsesAPI:
    def __init__(self, core: Core, *, records: ResponseRecords, sessions: SessionManager | None) -> None:
        self.core = core
        self.records = records
        self.sessions = sessions
        self.runs = ResponseRuns(core, sessions, records)
        self.retention = core.settings.responses_retention_seconds
        self._expiry: asyncio.Task | None = None

    # --- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        """Open the response store; forget expired responses every minute from now on."""
        await self.records.open()
        self._expiry = asyncio.get_running_loop().create_task(self._expire_forever(), name="responses-expiry")

    async def stop(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._expiry
        await self.records.close()

    async def _expire_forever(self) -> None:
        while True:
            try:
                await self.records.expire()
            except Exception:  # a store that is down: the next minute tries again
                log.warning("could not delete expired responses", exc_info=True)
            await asyncio.sleep(EXPIRY_SECONDS)

    # --- create -------------------------------------------------------------------------------
    async def create(self, ctx: RequestContext) -> None:
        payload = read_request(await read_body(ctx.receive))
        resume_from = asked_resume(ctx)
        if resume_from is not None and self.sessions is not None:
            # The same POST with Last-Event-ID: the rest of the response's stream from its log.
            call = StreamCall(path=RESPONSES_PATH, body=b"", dialect=ResponsesDialect(ResponsesRun("")),
                              resume_from=resume_from)
            await _answer(await self.sessions.stream(call, ctx), ctx)
            return
        engine_state = self.core.engine_state
        if not engine_state.served_models:  # never seen the engine yet: look before refusing
            await engine_state.refresh()
        previous = await self._previous(ctx.key_id, payload.get("previous_response_id"))
        items, turns = await chain.conversation(self.records, previous) if previous is not None else ([], [])
        request = prepare(payload, engine=engine_state, previous=previous, conversation=items)
        quota.check_rebuilt(request, self.core.settings.max_body_bytes)
        if request.store:
            await quota.check_room(self.records, ctx.key_id, self.core.settings)
            if turns:  # the conversation lives as long as its newest response
                await self.records.keep_until(ctx.key_id, turns, request.created_at + self.retention)
        request.engine_body = await budget.fit_body(budget.RESPONSES, payload, request.engine_body, request=ctx,
                                                    core=self.core)
        if request.background:
            response = await self._background(request, ctx)
            if response is None:  # its client left while the run waited in the queue
                return
        elif request.stream:
            response = await self.runs.stream(request, ctx, self._continuation(request))
        else:
            await self._unary(request, ctx)
            return
        await _answer(response, ctx)

    def _continuation(self, request: ResponsesRequest) -> Continuation | None:
        """How to go on on another engine when the stream's dies (sessions on, reproducible runs)."""
        if self.sessions is None or not self.core.engine_state.continues_streams:
            return None
        return continuation_for(request.payload, path=RESPONSES_PATH, body=request.engine_body)

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

    async def _unary(self, request: ResponsesRequest, ctx: RequestContext) -> None:
        async def answered(body: bytes) -> bytes:
            response = orjson.loads(body)
            response.update(request.patch)
            mark_cut_item(response)
            usage = response.get("usage") or {}
            self.core.metrics.count_usage(ctx.key_id, {"prompt_tokens": usage.get("input_tokens"),
                                                       "completion_tokens": usage.get("output_tokens")})
            body = orjson.dumps(response)
            if request.store:
                await self._store(request, ctx.key_id, response.get("status"), body)
            return body

        await relay_json(ctx, self.core.relay, "POST", RESPONSES_PATH, request.engine_body, count_usage=False,
                         route=request.route, on_success=answered)

    async def _store(self, request: ResponsesRequest, owner: str, status: object, body: bytes) -> None:
        """Keep a finished response; a store that fails costs its retrieval, not the answer."""
        try:
            await self.records.save_response(request.record(owner, self.retention, status=str(status), body=body))
        except Exception:
            log.exception("could not store a response", extra={"response_id": request.response_id})

    async def _background(self, request: ResponsesRequest, ctx: RequestContext) -> Response | None:
        if self.sessions is None:
            raise GatewayError(400, "background responses need resumable sessions, and this gateway runs with "
                                    "SESSION_STORE=off", param="background")
        try:
            run, _ = await self.runs.start_background(request, ctx, self._continuation(request))
        except ClientLeft:
            return None
        if request.stream:
            return await self.sessions.resume(owner=ctx.key_id, point=ResumePoint(request.response_id, -1))
        created = await run.created
        if created is None:  # the run ended before the engine said anything: answer how it stands
            record = await self.records.load_response(ctx.key_id, request.response_id)
            return _json(record.body if record is not None else orjson.dumps(request.queued_object()))
        return _json(orjson.dumps({**created, "status": "queued"}))

    # --- retrieve, cancel, delete -----------------------------------------------------------------
    async def retrieve(self, ctx: RequestContext) -> None:
        query = QueryParams(ctx.scope["query_string"])
        owner = ctx.key_id
        record = await self._load(owner, ctx.path_params["response_id"])
        stream = query.get("stream", "false").lower()
        if stream not in ("true", "false", "1", "0"):
            raise GatewayError(400, "'stream' must be true or false", param="stream")
        if stream not in ("true", "1"):
            await _answer(_json((await self._settled(record)).body), ctx)
            return
        admission = self.core.admission
        refusal = admission.try_enter(owner)
        if refusal is not None:
            self.core.metrics.rejected.labels("admission").inc()
            raise too_many_requests(refusal)
        try:
            await _answer(await self._replay(record, query.get("starting_after")), ctx)
        finally:
            admission.leave(owner)

    async def _replay(self, record: StoredResponse, starting_after: str | None) -> Response:
        if not record.has_events or self.sessions is None:
            raise GatewayError(400, "only background or streamed responses can be streamed again (this one was "
                                    "answered in one piece)", param="stream")
        after = -1
        if starting_after is not None:
            after = parse_position(starting_after)
            if after is None or after < 0:
                raise GatewayError(400, "'starting_after' must be a sequence number (an integer, 0 or more)",
                                   param="starting_after")
        owner, response_id = record.owner, record.response_id
        try:
            state = await self.sessions.describe(owner=owner, session_id=response_id)
        except NotFound:
            raise Gone(f"the events of response '{response_id}' are no longer kept (SESSIONS_TTL_SECONDS)",
                       param="response_id", code="events_expired") from None
        if state["status"] != "live" and after >= state["events"] - 1:
            if after == state["events"] - 1:
                return _empty_stream()
            raise _past_end(after, state["events"])
        try:
            response = await self.sessions.resume(owner=owner, point=ResumePoint(response_id, after))
        except Failure as error:
            if error.param == "last_event_id":
                raise _past_end(after, None) from None
            raise
        if response.status_code == 204:  # it ended meanwhile, and the client has everything
            return _empty_stream()
        return response

    async def cancel(self, ctx: RequestContext) -> None:
        record = await self._load(ctx.key_id, ctx.path_params["response_id"])
        if not record.background:
            raise GatewayError(400, "only background responses can be cancelled (a stream is stopped with "
                                    "POST /v1/cancel/{response_id})", param="response_id")
        record = await self._stop(record)
        await _answer(_json(record.body), ctx)

    async def delete(self, ctx: RequestContext) -> None:
        owner = ctx.key_id
        record = await self._stop(await self._load(owner, ctx.path_params["response_id"]))
        await self.records.delete_response(owner, record.response_id)
        body = orjson.dumps({"id": record.response_id, "object": "response", "deleted": True})
        await _answer(_json(body), ctx)

    async def _stop(self, record: StoredResponse) -> StoredResponse:
        """A running response with a run cancelled (idempotent: anything else is returned as it is)."""
        record = await self._settled(record)
        if not record.running or not record.has_events or self.sessions is None:
            return record
        try:
            await self.sessions.cancel(owner=record.owner, session_id=record.response_id)
        except NotFound:
            pass
        reloaded = await self.records.load_response(record.owner, record.response_id)
        return await self._settled(reloaded) or record

    async def _load(self, owner: str, response_id: str) -> StoredResponse:
        record = await self.records.load_response(owner, response_id)
        if record is None:
            raise GatewayError(404, f"Response with id '{response_id}' not found.", param="response_id",
                               code="response_not_found")
        return record

    async def _settled(self, record: StoredResponse | None) -> StoredResponse | None:
        if record is None:
            return record
        return await self.runs.settled(record)

    def routes(self) -> list[RawRoute]:
        handlers = {("POST", RESPONSES_PATH): self.create, ("GET", ONE): self.retrieve,
                    ("POST", CANCEL): self.cancel, ("DELETE", ONE): self.delete}
        return table.bind(table.rows("responses"), handlers, error_shape=RESPONSES_SHAPE, tags=TAGS,
                          extra=lambda row: {"streams": row.method != "DELETE" and row.path != CANCEL,
                                             "control": row.path != RESPONSES_PATH,
                                             "request_schema": RESPONSES_SCHEMA if row.path == RESPONSES_PATH
                                             else None})


async def _answer(response: Response, ctx: RequestContext) -> None:
    await response(ctx.scope, ctx.receive, ctx.send)


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
