"""The session manager: starts generations, attaches clients, cancels, forgets.

It lives on ``app.state.sessions``. Per process it holds the generations
produced here (and, with the memory store, recently finished ones), keyed by
(API key id, session id), so another key's session is simply not found.
With a persistent store it also serves sessions from the store: finished
ones after a restart, and live ones produced by another replica.

Disconnect policy: a generation whose last client left is stopped at once
unless the client named the session (in the body, or by resuming it); a named
one gets ``CANCEL_AFTER_DISCONNECT_SECONDS`` (and longer while a client
follows it from another replica).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections import OrderedDict

from starlette.requests import Request
from starlette.responses import Response

from gateway.auth import Principal
from gateway.config import Settings
from gateway.engine import EngineState
from gateway.errors import GatewayError
from gateway.metrics import Metrics
from gateway.openai.prepare import PreparedRequest
from gateway.streams import frames as F
from gateway.streams import replies as R
from gateway.streams.feeds import FeedBroken, LocalFeed, StoreFeed
from gateway.streams.ids import ResumePoint, new_session_id, resume_point_of
from gateway.streams.maintenance import maintain
from gateway.streams.producer import Generation, produce
from gateway.streams.response import SessionStreamResponse
from gateway.streams.session import Session, SessionKey
from gateway.streams.store.base import NewGeneration, SessionStore, StoredSession
from gateway.streams.writer import StoreWriter

log = logging.getLogger("gateway.streams")

STOP_WAIT_SECONDS = 5.0
REMOTE_CANCEL_WAIT_SECONDS = 5.0


class SessionManager:
    def __init__(self, *, settings: Settings, upstream, metrics: Metrics, engine: EngineState | None = None,
                 store: SessionStore | None = None) -> None:
        self.settings = settings
        self.upstream = upstream
        self.metrics = metrics
        self.engine = engine
        self.store = store
        self.replica = store.replica if store is not None else secrets.token_hex(8)
        self.lease = settings.session_lease_seconds
        self.check_interval = self.lease / 3
        self.listener_lease = self.lease
        self._sessions: dict[SessionKey, Session] = {}
        self._by_gen: dict[int, Session] = {}
        self._finished: OrderedDict[SessionKey, Session] = OrderedDict()  # memory store only
        self.writer = StoreWriter(store, interval=settings.session_flush_interval, on_written=self._ending_written,
                                  on_fenced=self._fenced) if store is not None else None
        self._background: list[asyncio.Task] = []
        self._stopping = False

    # --- lifecycle ---------------------------------------------------------------------
    async def start(self) -> None:
        self.loop = loop = asyncio.get_running_loop()
        if self.store is not None:
            self.store.on_cancel_request = self.cancel_requested_elsewhere
            await self.store.open()
            self._background.append(loop.create_task(self.writer.run(), name="sessions-writer"))
        self._background.append(loop.create_task(maintain(self), name="sessions-maintenance"))

    async def stop(self) -> None:
        """Stop every generation (ended with an explicit error event), persist, close."""
        self._stopping = True
        tasks = [s.task for s in self._sessions.values() if s.live and s.task is not None]
        for session in list(self._sessions.values()):
            session.stop("shutdown")
        if tasks:
            await asyncio.wait(tasks, timeout=STOP_WAIT_SECONDS)
        for task in self._background:
            task.cancel()
        for task in self._background:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.store is not None:
            try:
                await self.writer.flush()
                await self.store.retire()
            except Exception:
                log.exception("could not persist sessions at shutdown")
            await self.store.close()

    # --- entry points ----------------------------------------------------------------------
    async def stream(self, request: Request, prepared: PreparedRequest, *, principal: Principal,
                     on_complete=None) -> Response:
        """A streamed chat completion: a new generation, or a resume when Last-Event-ID is given."""
        point = resume_point_of(request.headers, request.query_params, session_id=prepared.session_id)
        if point is not None:
            return await self.resume(owner=principal.key_id, point=point)
        return await self._start(request, prepared, principal=principal, on_complete=on_complete)

    async def resume(self, *, owner: str, point: ResumePoint) -> Response:
        """Replay everything after ``point``, then follow live (404 unknown, 410 evicted, 204 nothing left)."""
        key = SessionKey(owner, point.session_id)
        start = point.next_index
        session = self._sessions.get(key)
        if session is not None:
            R.check_position(start, session.log.next_index, ended=not session.live)
            if start < session.log.base and self.store is None:
                raise R.evicted(start, session.log.base)
            if start == session.log.next_index and not session.live:
                return R.nothing_left(point.session_id)
            session.attach()
            session.named = True  # resuming is asking for the session to survive disconnects
            return self._response(LocalFeed(self, session, start), start, point.session_id)
        with _store_errors():
            record = await self._load(owner, point.session_id)
            if record.live and not record.producer_alive:
                await self.end_orphan(record)
                record = await self._load(owner, point.session_id)
            if not record.live:
                R.check_position(start, record.count, ended=True)
                if start == record.count:
                    return R.nothing_left(point.session_id)
                if start < record.count and not await self.store.read_frames(record.gen_id, start, max_chunks=1):
                    raise R.evicted(start, None)
            else:
                # Tell the producing replica at once that a client follows (it may be about to give up).
                await self.store.touch_listener(record.gen_id, self.listener_lease)
        return self._response(StoreFeed(self, record, checked=record.live), start, point.session_id)

    async def cancel(self, *, owner: str, session_id: str) -> dict:
        """Stop a generation (vLLM aborts it); every follower gets the cancelled ending."""
        session = self._sessions.get(SessionKey(owner, session_id))
        if session is not None:
            if session.live:
                session.stop(F.CANCEL_REQUEST)
                if session.task is not None:
                    await asyncio.wait((session.task,), timeout=STOP_WAIT_SECONDS)
                return R.cancel_result(session_id, session.how, cancelled=session.how == "cancelled")
            return R.cancel_result(session_id, session.how, cancelled=False)
        with _store_errors():
            record = await self._load(owner, session_id)
            if not record.live:
                return R.cancel_result(session_id, record.how, cancelled=False)
            if record.producer_alive:
                await self.store.request_cancel(record.gen_id)
                record = await self._wait_remote_end(record)
            else:
                await self.store.end_orphan(record.gen_id, self._cancelled_ending)
                record = await self._load(owner, session_id)
        return R.cancel_result(session_id, record.how, cancelled=record.how == "cancelled")

    async def describe(self, *, owner: str, session_id: str) -> dict:
        """The state of a session's current generation (404 if unknown)."""
        session = self._sessions.get(SessionKey(owner, session_id))
        if session is not None:
            status, how, count = session.state, session.how, session.log.next_index
        else:
            record = await self._load(owner, session_id)
            status, how, count = record.status, record.how, record.count
        return {"session_id": session_id, "object": "session", "status": status, "how": how, "events": count}

    # --- starting a generation -------------------------------------------------------------------
    async def _start(self, request: Request, prepared: PreparedRequest, *, principal: Principal,
                     on_complete) -> Response:
        if self._stopping:
            raise GatewayError(503, "the gateway is shutting down", code="shutting_down")
        named = prepared.session_id is not None
        key = SessionKey(principal.key_id, prepared.session_id or new_session_id())
        current = self._sessions.get(key)
        if current is not None and current.live:
            raise R.busy(key.session_id)
        choices = prepared.payload.get("n")
        session = Session(
            key, named=named, ring_size=self.settings.session_ring_size, persistent=self.store is not None,
            choices=choices if isinstance(choices, int) and 0 < choices <= 128 else 1,
            model=prepared.payload.get("model") or self._default_model(),
            request_id=request.scope["state"]["request_id"],
        )
        self._register(session)
        if named and self.store is not None:
            # Another replica may be producing this session id right now: ask the store.
            try:
                with _store_errors():
                    claimed = await self.store.claim(NewGeneration(key.owner, key.session_id, session.gen_id, True))
            except GatewayError:
                self._forget(session)
                raise
            if not claimed:
                self._forget(session)
                raise R.busy(key.session_id)
            session.stored = True
        session.attach()
        job = Generation(
            upstream=self.upstream, metrics=self.metrics, path=prepared.path, body=prepared.body,
            key_id=principal.key_id, strip_usage=not prepared.client_wants_usage, on_complete=on_complete,
            on_frames=self.writer.mark if self.writer is not None else _ignore, on_end=self._generation_ended,
            on_refused=self._refused,
        )
        session.task = asyncio.get_running_loop().create_task(produce(session, job), name="session-producer")
        return self._response(LocalFeed(self, session, 0), 0, key.session_id, opening=session)

    def _response(self, feed, start: int, session_id: str, *, opening: Session | None = None) -> Response:
        return SessionStreamResponse(feed=feed, start=start, session_id=session_id, opening=opening,
                                     keepalive_seconds=self.settings.sse_keepalive_seconds)

    # --- registry -------------------------------------------------------------------------------
    def _register(self, session: Session) -> None:
        old = self._sessions.get(session.key)
        if old is not None:
            old.replaced = True
            self._by_gen.pop(old.gen_id, None)
            self._finished.pop(session.key, None)
        self._sessions[session.key] = session
        self._by_gen[session.gen_id] = session

    def _forget(self, session: Session) -> None:
        if self._sessions.get(session.key) is session:
            del self._sessions[session.key]
            self._finished.pop(session.key, None)
        self._by_gen.pop(session.gen_id, None)

    async def _refused(self, session: Session) -> None:
        """The engine refused the request: the client gets the HTTP error, and nothing stays to resume."""
        session.replaced = True  # never written by the store writer
        self._forget(session)
        if session.stored:
            try:
                await self.store.discard(session.gen_id)
            except Exception:
                log.exception("could not discard a refused session")

    def _generation_ended(self, session: Session) -> None:
        if session.open_error is not None:
            return
        if self.store is None:
            self._finished[session.key] = session
            while len(self._finished) > self.settings.session_memory_max_finished:
                _, oldest = self._finished.popitem(last=False)
                self._forget(oldest)
        self._evict_if_idle(session)

    def _ending_written(self, session: Session) -> None:
        self._evict_if_idle(session)

    def _fenced(self, session: Session) -> None:
        """Another replica ended this generation (it took us for dead) or replaced it: stop."""
        if session.live:
            log.warning("session taken over in the store; stopping its generation here",
                        extra={"session_id": session.session_id})
            session.stop("fenced")
        self._evict_if_idle(session)

    def _evict_if_idle(self, session: Session) -> None:
        """With a store, a finished generation nobody follows leaves memory once fully persisted."""
        if self.store is not None and not session.live and session.ending_stored and not session.consumers:
            self._forget(session)

    # --- clients leaving ---------------------------------------------------------------------------
    def consumer_left(self, session: Session) -> None:
        if not session.detach():
            return
        if not session.live:
            self._evict_if_idle(session)
            return
        delay = self.settings.cancel_after_disconnect_seconds if session.named else 0.0
        if delay > 0:
            session.disconnect_timer = asyncio.get_running_loop().call_later(delay, self._alone_too_long, session)
        else:
            self._alone_too_long(session)

    def _alone_too_long(self, session: Session) -> None:
        session.disconnect_timer = None
        if session.consumers or not session.live:
            return
        if not session.named:
            session.stop(F.CLIENT_DISCONNECTED)  # plain OpenAI semantics: abort at once
        elif self.store is not None and session.stored:
            asyncio.get_running_loop().create_task(self._stop_unless_followed_elsewhere(session))
        else:
            session.stop(F.DISCONNECT_TIMEOUT)

    async def _stop_unless_followed_elsewhere(self, session: Session) -> None:
        try:
            followed = await self.store.has_listener(session.gen_id)
        except Exception:
            followed = False
        if session.consumers or not session.live:
            return
        if followed:
            session.disconnect_timer = asyncio.get_running_loop().call_later(
                self.check_interval, self._alone_too_long, session)
        else:
            session.stop(F.DISCONNECT_TIMEOUT)

    def cancel_requested_elsewhere(self, gen_id: int) -> None:
        session = self._by_gen.get(gen_id)
        if session is not None and session.live:
            session.stop(F.CANCEL_REQUEST)

    # --- the store side -----------------------------------------------------------------------------
    async def read_evicted(self, session: Session, index: int) -> list[bytes]:
        """Events that left a local ring: from the store, or a clear failure without one."""
        if self.store is None:
            raise FeedBroken(f"events from index {index} were evicted before this client read them "
                             f"(SESSION_RING_SIZE={self.settings.session_ring_size})", code="events_evicted")
        frames = await self.store.read_frames(session.gen_id, index)
        if not frames:
            raise FeedBroken(f"events from index {index} are no longer available", code="events_evicted")
        return frames

    async def end_orphan(self, record: StoredSession) -> None:
        """End a generation whose producer is gone, so its followers get an explicit end."""
        if await self.store.end_orphan(record.gen_id, self._interrupted_ending):
            log.warning("ended a session whose producer is gone",
                        extra={"session_id": record.session_id, "replica": record.replica})

    def _interrupted_ending(self, session_id: str, index: int) -> tuple[str, list[bytes]]:
        return "error", F.producer_lost_ending(session_id, index)

    def _cancelled_ending(self, session_id: str, index: int) -> tuple[str, list[bytes]]:
        return "cancelled", F.cancelled_ending(
            F.id_prefix(session_id), index, first_event=None, fallback_id=f"chatcmpl-{session_id}",
            model=self._default_model(), choices=1, reason=F.CANCEL_REQUEST)

    async def _load(self, owner: str, session_id: str) -> StoredSession:
        if self.store is None:
            raise R.unknown(session_id)
        with _store_errors():
            record = await self.store.load(owner, session_id)
        if record is None:
            raise R.unknown(session_id)
        return record

    async def _wait_remote_end(self, record: StoredSession) -> StoredSession:
        deadline = time.monotonic() + REMOTE_CANCEL_WAIT_SECONDS
        while record.live and time.monotonic() < deadline:
            await asyncio.wait((self.store.signal(record.gen_id),), timeout=0.05)
            record = await self._load(record.owner, record.session_id)
        return record

    # --- maintenance -----------------------------------------------------------------------------
    @property
    def producing(self) -> bool:
        """Whether this process produces any live generation."""
        return any(session.live for session in self._by_gen.values())

    async def collect_garbage(self) -> None:
        """Forget finished sessions older than the TTL; end generations whose producer died."""
        cutoff = time.time() - self.settings.sessions_ttl_seconds
        for session in list(self._sessions.values()):
            if not session.live and not session.consumers and session.ended_at is not None and session.ended_at < cutoff:
                self._forget(session)
        if self.store is not None:
            for record in await self.store.orphans():
                await self.end_orphan(record)
            await self.store.expire(self.settings.sessions_ttl_seconds)

    # --- introspection (tests, metrics) ---------------------------------------------------------
    @property
    def sessions_in_memory(self) -> int:
        return len(self._sessions)

    def local(self, owner: str, session_id: str) -> Session | None:
        return self._sessions.get(SessionKey(owner, session_id))

    def _default_model(self) -> str:
        return self.engine.default_model if self.engine is not None else "unknown"


def _ignore(session: Session) -> None:
    return None


@contextlib.contextmanager
def _store_errors():
    """A store that fails (database down) is a 503 for the client, never a 500."""
    try:
        yield
    except GatewayError:
        raise
    except Exception as exc:
        log.exception("session store unavailable")
        raise R.store_unavailable() from exc
