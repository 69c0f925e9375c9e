"""Responses that run as sessions: streamed ones, and background runs the gateway owns.

With sessions on, a streamed response is a session named by its response id: its events are
numbered (``id: <response_id>:<n>``, ``n`` its ``sequence_number``), kept in the session's log,
replayable (``GET /v1/responses/{id}?stream=true&starting_after=N`` is a resume after index N),
cancellable (``POST /v1/cancel/{id}``), and continued on another engine when theirs dies. Its
record (when ``store`` is not false) is saved ``in_progress`` before the stream starts and takes
the final response object before the terminal event reaches any client.

A background run, step by step: the engine request is opened first, in the POST itself (so an
engine refusal is the POST's own HTTP error), through flow control like any other generating
request (``queueing.open_stream``: it waits its turn in its band, the key's or the lower one
``x-priority`` asks for, so background work never skips ahead of interactive requests waiting;
a queue refusal is the POST's 429/503; the client leaving meanwhile takes it out of the queue),
and the run holds its grant, which counts against its key's concurrency and the in-flight caps,
for as long as it runs (with ``FLOW_CONTROL=false``: an admission slot of its key, refused at
once at the cap); the record is saved ``queued``; a detached run (the runner with the
session's log as its sink and no client: ``SessionManager.start_detached``) streams it from the
engine into the log, which the store persists and any replica can replay and follow. When the
engine's ``response.created`` arrives the record turns ``in_progress``; when the run ends its
last event says how (the engine's ``response.completed`` or ``response.incomplete``, as the
dialect names it, or the gateway's ``response.failed`` / ``response.cancelled``) and the record
takes that response object.

A run whose producer died (its replica crashed) is ended by the sessions (an orphan gets
``producer_lost``); :meth:`ResponseRuns.settled` brings its record in line with the ending the
first time someone looks, so no response stays ``in_progress`` for a run nobody produces.

When a background run ends (or its record is settled so), ``on_ended`` is told the owner, the
final status and the response id: the assembly (``gateway.app``) plugs in the webhooks'
``response.*`` events there; this package knows nothing of them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import orjson
from starlette.responses import Response

from gateway.core import Core
from gateway.engines.stream import EngineStream
from gateway.failures import Failure, LimitReached, Unavailable
from gateway.http import queueing
from gateway.http.context import RequestContext
from gateway.http.disconnect import DisconnectWatcher
from gateway.http.timing import EngineWait
from gateway.protocols.responses.dialect import TERMINAL_TYPES, ResponsesDialect, ResponsesRun, lifecycle_response
from gateway.protocols.responses.prepare import RESPONSES_PATH, ResponsesRequest
from gateway.protocols.responses.records.base import ResponseRecords, StoredResponse
from gateway.relay.call import StreamCall, with_affinity
from gateway.relay.continuation import Continuation
from gateway.relay.dialect import StreamResult
from gateway.relay.ending import ENDED_EARLY
from gateway.relay.metering import admit_call, settle_call
from gateway.relay.plain import plain_stream
from gateway.sessions.generation import Generation
from gateway.sessions.manager import SessionManager

log = logging.getLogger("gateway.responses")

class ClientLeft(Exception):
    """The client of a background POST left while its run waited in the queue: nothing started, nobody to answer."""


# Told once a background response ended: (owner=, status=, response_id=); never raises into the run.
EndedHook = Callable[..., Awaitable[object]]


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
    return run.ended_object("failed", error={"code": "stream_interrupted", "message": result.error or ENDED_EARLY})


class ResponseRuns:
    def __init__(self, core: Core, sessions: SessionManager | None, records: ResponseRecords) -> None:
        self.core = core
        self.sessions = sessions
        self.records = records
        self.retention = core.settings.responses_retention_seconds
        # A record younger than this may not have its session yet (saved just before it).
        self.settle_grace = core.settings.session_lease_seconds
        self._progress: set[asyncio.Task] = set()
        self.on_ended: EndedHook | None = None  # set at assembly (webhooks), else nobody is told

    # --- a streamed response ----------------------------------------------------------------------
    async def stream(self, request: ResponsesRequest, ctx: RequestContext,
                     continuation: Continuation | None) -> Response:
        """The stream of a response: a session when sessions are on, else relayed plainly."""
        run = ResponsesRun(request.response_id, patch=request.patch)
        owner = ctx.key_id
        call = StreamCall(path=RESPONSES_PATH, body=request.engine_body, dialect=ResponsesDialect(run),
                          model=request.model, route=request.route)
        sessions = self.sessions
        if request.store:
            stored: list[bool] = []

            async def store_final(final: dict) -> None:
                if stored:
                    return
                stored.append(True)
                try:
                    if sessions is None:
                        await self.records.save_response(request.record(owner, self.retention,
                                                                        status=str(final.get("status")),
                                                                        body=orjson.dumps(final)))
                    else:
                        await self.records.update_response(owner, request.response_id,
                                                           status=str(final.get("status")), body=orjson.dumps(final))
                except Exception:  # a store that fails costs its retrieval, not the answer
                    log.exception("could not store a response", extra={"response_id": request.response_id})

            async def before_end() -> None:  # so a client that reads the end and retrieves finds it
                await store_final(run.final)

            async def finished(result: StreamResult) -> None:  # (already stored when the end went by)
                await store_final(final_object(run, None, result))

            call.before_end, call.on_complete = before_end, finished
        if sessions is None:
            return plain_stream(call, ctx, self.core.relay)
        call.session_id, call.named, call.continuation = request.response_id, False, continuation
        if not request.store:
            return await sessions.stream(call, ctx)
        in_progress = {**request.queued_object(), "status": "in_progress"}
        await _saved(self.records.save_response(request.record(owner, self.retention, status="in_progress",
                                                               body=orjson.dumps(in_progress), streamed=True)))
        try:
            return await sessions.stream(call, ctx)
        except Failure as refusal:  # no room for another session (the record says so)
            await store_final(run.ended_object("failed", error={"code": refusal.code or "not_started",
                                                                "message": refusal.message}))
            raise

    # --- a background run ---------------------------------------------------------------------------
    async def start_background(self, request: ResponsesRequest, ctx: RequestContext,
                               continuation: Continuation | None) -> tuple[ResponsesRun, Generation]:
        """Open the engine request, save the record, start the detached run."""
        core, sessions = self.core, self.sessions
        owner = ctx.key_id
        slot = core.relay.flow is None  # without flow control, an admission slot of its own (with it, the grant)
        if slot:
            refusal = core.admission.try_enter(owner)
            if refusal is not None:
                core.metrics.rejected.labels("admission").inc()
                raise LimitReached(refusal, code="too_many_requests", retry_after=1)

        def leave() -> None:
            if slot:
                core.admission.leave(owner)

        stream: EngineStream | None = None
        try:
            # Limits and the ledger: admitted here, settled by the run's ending (relay.metering).
            request.engine_body = await admit_call(ctx, core.relay.meter, RESPONSES_PATH, request.engine_body,
                                                   stream=True, routed_model=request.model)
            stream = await self._open(request, ctx)
            if stream.status >= 400:
                raise await stream.refusal()
            record = request.record(owner, self.retention, status="queued", body=orjson.dumps(request.queued_object()))
            await _saved(self.records.save_response(record))
        except BaseException as exc:
            leave()
            queueing.release(ctx)
            await settle_call(ctx, answered=False, failure=exc)
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
                await self._tell_ended(owner, str(final.get("status")), request.response_id)
            finally:
                leave()  # (its grant was released by the run's ending)
                if not run.created.done():
                    run.created.set_result(None)

        call = StreamCall(path=RESPONSES_PATH, body=request.engine_body, dialect=ResponsesDialect(run),
                          session_id=request.response_id, model=request.model, route=request.route,
                          on_complete=finished, continuation=continuation)
        try:
            generation = await sessions.start_detached(call, ctx, stream=stream, holds_admission=False)  # it holds one
        except BaseException:
            stream.close()
            leave()
            queueing.release(ctx)
            await settle_call(ctx, answered=False)
            await self.records.update_response(owner, request.response_id, status="failed", body=orjson.dumps(
                run.ended_object("failed", error={"code": "not_started", "message": "the run could not start"})))
            raise
        started.append(generation)
        task = asyncio.get_running_loop().create_task(self._mark_in_progress(owner, run))
        self._progress.add(task)
        task.add_done_callback(self._progress.discard)
        return run, generation

    async def _open(self, request: ResponsesRequest, ctx: RequestContext) -> EngineStream:
        """The run's engine stream, once flow control lets it go; ``ClientLeft`` if its client left while it waited."""
        core = self.core
        task = asyncio.current_task()
        watcher = DisconnectWatcher(ctx.receive, task.cancel).start()
        try:
            with EngineWait(ctx):
                return await queueing.open_stream(core.relay.flow, core.engines, RESPONSES_PATH, request.engine_body,
                                                  request=ctx, route=with_affinity(request.route, ctx))
        except asyncio.CancelledError:
            if watcher.disconnected and task.uncancel() == 0:
                raise ClientLeft() from None  # out of the queue (or the engine request closed): nothing runs
            raise
        finally:
            watcher.stop()
            if watcher.disconnected:  # it left just as the stream opened: a background run goes on without it
                while task.cancelling():
                    task.uncancel()

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

    # --- records of runs nobody finished ------------------------------------------------------------
    async def settled(self, record: StoredResponse) -> StoredResponse:
        """``record``, brought in line with its run's ending if the run ended without updating it."""
        if not record.running or not record.has_events or self.sessions is None:
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
        if record.background:
            await self._tell_ended(record.owner, str(final["status"]), record.response_id)
        return await self.records.load_response(record.owner, record.response_id) or record

    async def _tell_ended(self, owner: str, status: str, response_id: str) -> None:
        if self.on_ended is None:
            return
        try:
            await self.on_ended(owner=owner, status=status, response_id=response_id)
        except Exception:  # a webhook store that fails costs the event, never the run
            log.exception("could not publish a response's end", extra={"response_id": response_id})


async def _saved(work) -> None:
    """A store that fails (database down) is a 503 for the client, never a 500."""
    try:
        await work
    except Failure:
        raise
    except Exception as exc:
        log.exception("response store unavailable")
        raise Unavailable("the response store is unavailable", code="response_store_unavailable") from exc
