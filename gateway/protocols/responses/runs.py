"""Background responses: the gateway owns the run, the session store keeps its events, the record its object.

A run, step by step: the engine request is opened first, in the POST itself (so an engine
refusal is the POST's own HTTP error, and the run takes an admission slot of its key for
as long as it runs); the record is saved ``queued``; a detached session producer
(``SessionManager.start_detached``, session id = response id) streams it from the engine
into the event log, which the store persists and any replica can replay and follow
(``GET /v1/responses/{id}?stream=true&starting_after=N`` is a resume after index N). When
the engine's ``response.created`` arrives the record turns ``in_progress``; when the run
ends its last event says how (the engine's ``response.completed``, or the gateway's
``response.failed`` / ``response.cancelled``) and the record takes that response object.

A run whose producer died (its replica crashed) is ended by the sessions (an orphan gets
``producer_lost``); :meth:`BackgroundRuns.settled` brings its record in line with the
ending the first time someone looks, so no response stays ``in_progress`` for a run
nobody produces.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

import orjson
from starlette.types import Scope

from gateway.core import Core
from gateway.engines.stream import EngineStream
from gateway.http.errors import OPENAI_SHAPE, GatewayError
from gateway.http.timing import EngineWait
from gateway.protocols.responses.dialect import TERMINAL_TYPES, ResponsesDialect, ResponsesRun, lifecycle_response
from gateway.protocols.responses.prepare import RESPONSES_PATH, ResponsesRequest
from gateway.relay.context import RelayContext, StreamCall
from gateway.relay.dialect import StreamResult
from gateway.sessions.generation import Generation
from gateway.sessions.manager import SessionManager
from gateway.sessions.store.base import ResponseRecords, StoredResponse

log = logging.getLogger("gateway.responses")


@dataclass(slots=True)
class _OpenedContext(RelayContext):
    """A request's relay context whose engine stream is already open (the POST opened it)."""

    stream: EngineStream | None = None

    def opener(self, call: StreamCall):
        stream = self.stream

        async def opened() -> EngineStream:
            return stream

        return opened


def final_object(run: ResponsesRun, last_frame: bytes | None, result: StreamResult) -> dict:
    """The response object a finished stream leaves: its terminal event's, else what its ending means."""
    if run.final is not None:
        return run.final
    found = lifecycle_response(last_frame) if last_frame is not None else None
    if found is not None and found[0] in TERMINAL_TYPES:
        return found[1]
    if result.how == "cancelled":
        return run.ended_object("cancelled")
    if result.how == "client_disconnect":
        return run.ended_object("incomplete", incomplete_details={"reason": "client_disconnected"})
    return run.ended_object("failed", error={"code": "stream_interrupted",
                                             "message": result.error or "the stream ended early"})


class BackgroundRuns:
    def __init__(self, core: Core, sessions: SessionManager, records: ResponseRecords) -> None:
        self.core = core
        self.sessions = sessions
        self.records = records
        self.retention = core.settings.responses_retention_seconds
        # A record younger than this may not have its session yet (saved just before it).
        self.settle_grace = core.settings.session_lease_seconds
        self._progress: set[asyncio.Task] = set()

    async def start(self, request: ResponsesRequest, scope: Scope) -> tuple[ResponsesRun, Generation]:
        """Open the engine request, save the record, start the detached producer."""
        core = self.core
        ctx = core.relay_context(scope, error_shape=OPENAI_SHAPE)
        owner = ctx.key_id
        refusal = core.admission.try_enter(owner)
        if refusal is not None:
            core.metrics.rejected.labels("admission").inc()
            raise GatewayError(429, refusal, code="too_many_requests", headers={"retry-after": "1"})
        stream: EngineStream | None = None
        try:
            with EngineWait(scope):
                stream = await core.engines.open_stream(RESPONSES_PATH, request.engine_body,
                                                        request_id=ctx.request_id, route=ctx.route(request.route))
            if stream.status >= 400:
                raise await stream.refusal()
            record = request.record(owner, self.retention, status="queued", body=orjson.dumps(request.queued_object()))
            await _saved(self.records.save_response(record))
        except BaseException:
            core.admission.leave(owner)
            if stream is not None:
                stream.close()
            raise
        run = ResponsesRun(request.response_id, patch=request.patch,
                           created=asyncio.get_running_loop().create_future())
        started: list[Generation] = []

        async def finished(result: StreamResult) -> None:
            try:
                frames = started[0].log.frames if started else []
                final = final_object(run, frames[-1] if frames else None, result)
                await self.records.update_response(owner, request.response_id, status=str(final.get("status")),
                                                   body=orjson.dumps(final))
            finally:
                core.admission.leave(owner)
                if not run.created.done():
                    run.created.set_result(None)

        call = StreamCall(path=RESPONSES_PATH, body=request.engine_body, dialect=ResponsesDialect(run),
                          session_id=request.response_id, model=request.model, route=request.route,
                          on_complete=finished)
        opened = _OpenedContext(engines=ctx.engines, metrics=ctx.metrics, key_id=owner, request_id=ctx.request_id,
                                keepalive_seconds=ctx.keepalive_seconds, error_shape=ctx.error_shape, stream=stream)
        try:
            generation = await self.sessions.start_detached(call, opened, holds_admission=False)  # it holds one
        except BaseException:
            stream.close()
            core.admission.leave(owner)
            await self.records.update_response(owner, request.response_id, status="failed", body=orjson.dumps(
                run.ended_object("failed", error={"code": "not_started", "message": "the run could not start"})))
            raise
        started.append(generation)
        task = asyncio.get_running_loop().create_task(self._mark_in_progress(owner, run))
        self._progress.add(task)
        task.add_done_callback(self._progress.discard)
        return run, generation

    async def _mark_in_progress(self, owner: str, run: ResponsesRun) -> None:
        created = await run.created
        if created is None:
            return
        try:
            await self.records.update_response(owner, run.response_id, status="in_progress",
                                               body=orjson.dumps({**created, "status": "in_progress"}),
                                               from_statuses=("queued",))
        except Exception:
            log.exception("could not mark a background response in progress",
                          extra={"response_id": run.response_id})

    async def settled(self, record: StoredResponse) -> StoredResponse:
        """``record``, brought in line with its run's ending if the run ended without updating it."""
        if not record.running or not record.background:
            return record
        outcome = await self.sessions.outcome(owner=record.owner, session_id=record.response_id)
        found = lifecycle_response(outcome.last_frame) if outcome is not None and outcome.last_frame else None
        ended = found is not None and found[0] in TERMINAL_TYPES  # (its producer may not have noticed yet)
        if outcome is not None and outcome.live and not ended:
            return record
        if outcome is None and time.time() - record.created_at < self.settle_grace:
            return record  # saved just before its session: not visible yet
        body = orjson.loads(record.body)
        if ended:
            final = {**body, **found[1]}
        else:
            final = {**body, "status": "failed", "error": {
                "code": "producer_lost", "message": "the run's events are no longer available: the gateway producing "
                                                    "it stopped, or they expired (SESSIONS_TTL_SECONDS)"}}
        await self.records.update_response(record.owner, record.response_id, status=str(final["status"]),
                                           body=orjson.dumps(final))
        return await self.records.load_response(record.owner, record.response_id) or record


async def _saved(work) -> None:
    """A store that fails (database down) is a 503 for the client, never a 500."""
    try:
        await work
    except GatewayError:
        raise
    except Exception as exc:
        log.exception("response store unavailable")
        raise GatewayError(503, "the response store is unavailable", code="response_store_unavailable") from exc
