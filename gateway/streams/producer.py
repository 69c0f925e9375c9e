"""The producer: one task per generation reads the engine's stream into the session's log.

It outlives the clients that follow it: a client going away only detaches a
consumer. The producer frames each event once (``id: <session>:<index>``),
appends whatever one upstream read completed as one batch, and always ends
the log with an explicit ending and ``[DONE]``: the engine's own end, a
cancelled chunk, or an error event. At the end it counts usage per API key
(estimated for aborted streams) and runs the caller's completion hook.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from gateway.errors import GatewayError
from gateway.metrics import Metrics
from gateway.sse import DONE, SSEFramer
from gateway.stream_result import StreamResult, StreamTracker
from gateway.streams.frames import cancelled_ending, done_frame, error_ending, frame
from gateway.streams.session import ENDED, STOP_HOW, Session
from gateway.upstream import UpstreamClient, parse_error_body

log = logging.getLogger("gateway.streams")


@dataclass(slots=True)
class Generation:
    """What a producer needs to run one generation."""

    upstream: UpstreamClient
    metrics: Metrics
    path: str
    body: bytes
    key_id: str
    strip_usage: bool  # the creating client did not ask for the usage chunk
    on_complete: Callable[[StreamResult], Awaitable[None]] | None
    on_frames: Callable[[Session], None]   # called after every append (store writer)
    on_end: Callable[[Session], None]      # called once the log is closed
    on_refused: Callable[[Session], Awaitable[None]]  # the engine refused: forget it before answering


async def produce(session: Session, job: Generation) -> None:
    tracker = StreamTracker(collect_text=job.on_complete is not None)
    saw_done = False
    failure: GatewayError | None = None
    stream = None
    try:
        stream = await _open(session, job)
        if stream is not None:
            saw_done = await _read(session, job, stream, tracker)
    except GatewayError as exc:
        failure = exc
    except asyncio.CancelledError:
        if session.stop_reason is None:  # not a stop we asked for: end the log, then obey
            _close(session, job, "error", error_ending(session.prefix, session.log.next_index,
                                                       "the generation was interrupted", code="stream_interrupted"))
            raise
        asyncio.current_task().uncancel()
    except Exception:
        log.exception("session producer failed", extra={"session_id": session.session_id})
        failure = GatewayError(502, "the gateway failed while relaying the stream", code="stream_interrupted")
    finally:
        if stream is not None:
            stream.close()
    if session.state == ENDED:  # failed to open: already closed by _open
        return
    how, ending, message = _ending(session, saw_done, failure)
    if how == "error" and session.stop_reason is None:
        job.metrics.upstream_errors.labels("stream_broken").inc()
    _close(session, job, how, ending)

    result = tracker.result()
    result.how = how
    if message is not None:
        result.error = message
    job.metrics.streams_ended.labels(how).inc()
    job.metrics.count_usage(job.key_id, result.usage or result.estimated_usage())
    if job.on_complete is not None:
        try:
            await job.on_complete(result)
        except Exception:
            log.exception("stream completion hook failed", extra={"session_id": session.session_id})


async def _open(session: Session, job: Generation):
    """The engine's stream, or None after closing the log with the engine's refusal."""
    try:
        stream = await job.upstream.open_stream(job.path, job.body, request_id=session.request_id)
        if stream.status >= 400:
            body = await stream.response.read()
            stream.close()
            raise parse_error_body(stream.status, body)
    except GatewayError as exc:
        job.metrics.upstream_errors.labels(exc.code or str(exc.status)).inc()
        session.open_error = exc
        await job.on_refused(session)
        _close(session, job, "error", error_ending(session.prefix, 0, exc.message, code=exc.code or "upstream_error"))
        return None
    finally:
        if not session.opened.done():
            session.opened.set_result(None)
    session.stream = stream
    if session.stop_reason is not None:  # stopped while the engine was answering
        stream.close()
        return None
    return stream


async def _read(session: Session, job: Generation, stream, tracker: StreamTracker) -> bool:
    """Relay the engine's events into the log; True if the engine sent ``[DONE]``."""
    log_ = session.log
    prefix = session.prefix
    strip_usage = job.strip_usage
    on_frames = job.on_frames
    framer = SSEFramer()
    async for chunk in stream.iter_bytes():
        events = framer.feed(chunk)
        if not events:
            continue
        index = log_.next_index
        frames = []
        for event in events:
            if event.startswith(DONE):
                if frames:
                    log_.append(frames)
                    on_frames(session)
                return True
            if tracker.observe(event) and strip_usage:
                continue  # the usage-only chunk: not logged, so no index is skipped
            frames.append(frame(prefix, index, event))
            index += 1
        if frames:
            if session.first_event is None:
                session.first_event = events[0]
            log_.append(frames)
            on_frames(session)
    return False


def _ending(session: Session, saw_done: bool, failure: GatewayError | None) -> tuple[str, list[bytes], str | None]:
    """How the generation ended, the frames that say so, and the error message if any."""
    prefix, index = session.prefix, session.log.next_index
    if saw_done:
        return "completed", [done_frame(prefix, index)], None
    reason = session.stop_reason
    if reason == "shutdown":
        message = "the gateway shut down during the generation"
        return "error", error_ending(prefix, index, message, code="gateway_shutdown"), message
    if reason == "fenced":
        message = "another gateway replica ended or replaced this generation"
        return "error", error_ending(prefix, index, message, code="producer_lost"), message
    if reason is not None:
        ending = cancelled_ending(
            prefix, index, first_event=session.first_event, fallback_id=f"chatcmpl-{session.request_id}",
            model=session.model, choices=session.choices, reason=reason,
        )
        return STOP_HOW[reason], ending, None
    message = failure.message if failure is not None else "the inference engine ended the stream early"
    return "error", error_ending(prefix, index, message, code="stream_interrupted"), message


def _close(session: Session, job: Generation, how: str, ending: list[bytes]) -> None:
    session.state = ENDED
    session.how = how
    session.ended_at = time.time()
    session.stream = None
    session.log.finish(ending)
    job.on_frames(session)
    job.on_end(session)
