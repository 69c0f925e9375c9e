"""The session manager, the stream backend with resumable sessions: starts generations, attaches followers, cancels.

Per process it holds the generations produced here (and, with the memory store, recently
finished ones), keyed by (API key id, session id), so another key's session is simply not
found. With a persistent store it also serves sessions from the store: finished ones after
a restart, and live ones produced by another replica.

Disconnect policy: a generation whose last client left is stopped at once unless the
client named the session (in the body, or by resuming it); a named one gets
``CANCEL_AFTER_DISCONNECT_SECONDS`` (and longer while a client follows it from another
replica).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from starlette.responses import Response

from gateway.config import Settings
from gateway.engines.stream import EngineStream
from gateway.failures import Failure, LimitReached, Unavailable
from gateway.http.admission import Admission
from gateway.http.context import RequestContext
from gateway.relay.call import Relay, StreamCall
from gateway.relay.dialect import StreamDialect
from gateway.relay.ending import CANCEL_REQUEST, CLIENT_DISCONNECTED, DISCONNECT_TIMEOUT, FENCED, SHUTDOWN
from gateway.relay.plain import RunResponse
from gateway.relay.run import Run
from gateway.sessions import replies as R
from gateway.sessions.feeds import LocalFeed, StoreFeed
from gateway.sessions.generation import Generation, SessionKey
from gateway.sessions.ids import ResumePoint, new_session_id, parse_last_event_id
from gateway.sessions.maintenance import maintain
from gateway.sessions.persistence import LOST, EndingDialect, FeedBroken, Persistence
from gateway.sessions.response import FollowerResponse
from gateway.sessions.sink import LogSink, SinkHooks
from gateway.sessions.store.base import NewGeneration, SessionStore
from gateway.tracing.hooks import trace_of

log = logging.getLogger("gateway.sessions")

STOP_WAIT_SECONDS = 5.0
STORE_FAILURE_LOG_SECONDS = 60.0
REMOTE_CANCEL_WAIT_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class SessionOutcome:
    """Where a session's current generation stands (``SessionManager.outcome``)."""

    live: bool
    how: str | None               # once ended: completed | cancelled | client_disconnect | error | producer_lost
    last_frame: bytes | None      # its last event so far, as framed (once ended: its ending)


def default_live_cap(settings: Settings) -> int:
    """A key's live generations without ``MAX_LIVE_SESSIONS_PER_KEY``: what it may have in flight, plus, with
    flow control on, what it may have waiting in its queue (a queued stream is a live session already)."""
    queued = settings.flow_queue_max_per_key if settings.flow_control else 0
    return settings.max_inflight_per_key + queued


class SessionManager:
    resumable = True

    def __init__(self, *, settings: Settings, relay: Relay, dialect: StreamDialect, store: SessionStore | None = None,
                 default_model: Callable[[], str] = lambda: "unknown", admission: Admission | None = None,
                 dialects: Mapping[str, EndingDialect] | None = None) -> None:
        """``dialect``: the default stream dialect of sessions (endings written for a stored session
        whose own dialect is not in ``dialects``, by name); ``default_model``: the model named in
        endings written for a session produced elsewhere."""
        self.settings = settings
        self.relay = relay
        metrics = relay.metrics
        self.dialect = dialect
        self.admission = admission  # detached generations hold a slot of their own
        self.store = store
        self.replica = store.replica if store is not None else secrets.token_hex(8)
        self.persistence = Persistence(store, settings=settings, dialect=dialect, default_model=default_model,
                                       on_written=self._ending_written, on_fenced=self._fenced,
                                       dialects=dialects) \
            if store is not None else None
        self._generations: dict[SessionKey, Generation] = {}
        metrics.sessions_in_memory.set_function(lambda: len(self._generations))
        self._by_gen: dict[int, Generation] = {}
        # Memory store only: finished generations kept resumable, per API key (one key's many
        # sessions never push out another's).
        self._finished: dict[str, OrderedDict[SessionKey, Generation]] = {}
        self._live_by_owner: dict[str, int] = {}
        self._background: list[asyncio.Task] = []
        self._spawned: set[asyncio.Task] = set()  # tasks nobody awaits, kept until done (the loop keeps weak refs)
        self._stopping = False
        self._shutdown_timer: asyncio.TimerHandle | None = None
        self._grace_ends: float | None = None  # (loop time) when the drain's grace period runs out
        self._store_failures = StoreFailures()
        self._hooks = SinkHooks(
            on_frames=self.persistence.writer.mark if self.persistence is not None else _ignore,
            on_refused=self._refused, on_end=self._generation_ended, read_evicted=self._read_evicted)

    def _spawn(self, work, name: str) -> None:
        task = asyncio.get_running_loop().create_task(work, name=name)
        self._spawned.add(task)
        task.add_done_callback(self._spawned.discard)

    def _store_errors(self):
        """Around store calls a request waits on: a failing store is a 503 (``StoreFailures``)."""
        return self._store_failures.guard()

    # --- lifecycle ---------------------------------------------------------------------
    async def start(self) -> None:
        self.loop = loop = asyncio.get_running_loop()
        check_interval = self.settings.session_lease_seconds / 3
        if self.store is not None:
            self.store.on_cancel_request = self.cancel_requested_elsewhere
            await self.store.open()
            self._background.append(loop.create_task(self.persistence.writer.run(), name="sessions-writer"))
        gc_every = min(60.0, max(1.0, self.settings.sessions_ttl_seconds / 10))
        chores = maintain(self.store, beat_every=check_interval, gc_every=gc_every, producing=self._producing,
                          on_cancel=self.cancel_requested_elsewhere, collect_garbage=self.collect_garbage)
        self._background.append(loop.create_task(chores, name="sessions-maintenance"))

    def begin_shutdown(self, grace_seconds: float) -> None:
        """The server is stopping: no new generation; every live one gets its explicit ending in time.

        A generation nobody follows ends at once (no client would see more of it); the
        others, and detached runs (their record keeps what they produce), keep streaming until
        a second before the server cuts connections, then end with ``gateway_shutdown``, so
        connected clients receive it.
        """
        self._stopping = True
        for generation in list(self._generations.values()):
            # (a detached run is followed by nobody but has its result to keep: it gets the grace period too)
            if generation.live and not generation.consumers and not generation.detached:
                generation.stop(SHUTDOWN)
        loop = asyncio.get_running_loop()
        self._grace_ends = loop.time() + max(0.0, grace_seconds - 1.0)
        self._shutdown_timer = loop.call_later(max(0.0, grace_seconds - 1.0), self._stop_all)

    async def finish_detached(self) -> None:
        """The lifespan's first step out: detached runs (background responses) use the grace they were given.

        uvicorn runs the lifespan's shutdown as soon as no connection is open: a detached run has
        none, so it was stopped at once (``gateway_shutdown``, its response ``failed``) however much
        of the grace period was left, while a stream with a client went on. Waited for here, before
        anything it writes to closes, until it ends or the grace runs out (then ``_stop_all`` ends it).
        """
        if self._grace_ends is None:
            return  # (stopped without a drain: nothing was promised)
        tasks = {g.task for g in self._generations.values() if g.live and g.detached and g.task is not None}
        left = self._grace_ends - asyncio.get_running_loop().time()
        if tasks and left > 0:
            await asyncio.wait(tasks, timeout=left + 1.0)  # (+1: the ending _stop_all writes at the grace's end)

    def _stop_all(self) -> None:
        for generation in list(self._generations.values()):
            generation.stop(SHUTDOWN)

    async def stop(self) -> None:
        """Stop every generation (ended with an explicit error event), persist, close."""
        self._stopping = True
        if self._shutdown_timer is not None:
            self._shutdown_timer.cancel()
        tasks = [g.task for g in self._generations.values() if g.live and g.task is not None]
        for generation in list(self._generations.values()):
            generation.stop(SHUTDOWN)
        if tasks:
            await asyncio.wait(tasks, timeout=STOP_WAIT_SECONDS)
        for task in self._background:
            task.cancel()
        for task in self._background:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.store is not None:
            try:
                await self.persistence.writer.flush()
                await self.store.retire()
            except Exception:
                log.exception("could not persist sessions at shutdown")
            await self.store.close()

    # --- the stream backend -------------------------------------------------------------
    async def stream(self, call: StreamCall, request: RequestContext) -> Response:
        """A streamed response: a new generation, or a resume when the request carries Last-Event-ID."""
        if call.resume_from is not None:
            point = parse_last_event_id(call.resume_from, session_id=call.session_id)
            return await self.resume(owner=request.key_id, point=point)
        generation = await self._new_generation(call, request)
        return RunResponse(self._run(generation, call, request))

    async def resume(self, *, owner: str, point: ResumePoint, keepalive_seconds: float | None = None) -> Response:
        """Replay everything after ``point``, then follow live (404 unknown, 410 evicted, 204 nothing left)."""
        key = SessionKey(owner, point.session_id)
        start = point.next_index
        keepalive = keepalive_seconds if keepalive_seconds is not None else self.settings.sse_keepalive_seconds
        generation = self._generations.get(key)
        if generation is not None:
            R.check_position(start, generation.log.next_index, ended=not generation.live)
            lost_from = generation.log.lost_from  # (the store's copy stops there: see StoreWriter)
            if start < generation.log.base and (self.store is None or lost_from is not None and start >= lost_from):
                raise R.evicted(start, generation.log.base)
            if start == generation.log.next_index and not generation.live:
                return R.nothing_left(point.session_id)
            generation.attach()
            generation.named = True  # resuming is asking for the session to survive disconnects
            feed = LocalFeed(generation, start, read_evicted=self._read_evicted, on_close=self._client_left)
            return self._follower(feed, start, point.session_id, keepalive, generation.dialect)
        with self._store_errors():
            record = await self._load(owner, point.session_id)
            if record.live and not record.producer_alive:
                await self.persistence.end_orphan(record)
                record = await self._load(owner, point.session_id)
            if not record.live:
                if record.how != LOST:  # the whole generation is stored: nothing lies past its end
                    R.check_position(start, record.count, ended=True)
                if start == record.count:
                    return R.nothing_left(point.session_id)
                if start < record.count and not await self.store.read_frames(record.gen_id, start, max_chunks=1):
                    raise R.evicted(start, None)
            else:
                # Tell the producing replica at once that a client follows (it may be about to give up).
                await self.store.touch_listener(record.gen_id, self.persistence.listener_lease)
        feed = StoreFeed(self.persistence, record, checked=record.live)
        dialect = self.persistence.dialect_for(record.dialect, point.session_id, max(start, record.count))
        return self._follower(feed, start, point.session_id, keepalive, dialect)

    async def cancel(self, *, owner: str, session_id: str) -> dict:
        """Stop a generation (vLLM aborts it); every follower gets the cancelled ending."""
        generation = self._generations.get(SessionKey(owner, session_id))
        if generation is not None:
            if generation.live:
                task = generation.task
                generation.stop(CANCEL_REQUEST)
                if task is not None:
                    await asyncio.wait((task,), timeout=STOP_WAIT_SECONDS)
                return R.cancel_result(session_id, generation.how, cancelled=generation.how == "cancelled")
            return R.cancel_result(session_id, generation.how, cancelled=False)
        with self._store_errors():
            record = await self._load(owner, session_id)
            if not record.live:
                return R.cancel_result(session_id, record.how, cancelled=False)
            if record.producer_alive:
                await self.store.request_cancel(record.gen_id)
                record = await self._wait_remote_end(record)
            else:
                read_back = await self.persistence.read_back(record)
                await self.store.end_orphan(record.gen_id, lambda sid, index: self.persistence.cancelled_ending(
                    sid, index, record.dialect, read_back=read_back))
                record = await self._load(owner, session_id)
        return R.cancel_result(session_id, record.how, cancelled=record.how == "cancelled")

    async def describe(self, *, owner: str, session_id: str) -> dict:
        """The state of a session's current generation (404 if unknown)."""
        generation = self._generations.get(SessionKey(owner, session_id))
        if generation is not None:
            status, how, count = generation.state, generation.how, generation.log.next_index
        else:
            with self._store_errors():
                record = await self._load(owner, session_id)
            status, how, count = record.status, record.how, record.count
        return R.session_state(session_id, status=status, how=how, events=count)

    async def outcome(self, *, owner: str, session_id: str) -> SessionOutcome | None:
        """Where a session's current generation stands, or None when it is unknown (or another key's).

        A generation stored live whose producer died is ended first (with its dialect's
        error ending), so the answer is never "live" for a run nobody produces any more. The
        last event is given even while live: it may already be the stream's terminal event.
        """
        generation = self._generations.get(SessionKey(owner, session_id))
        if generation is not None:
            frames = generation.log.frames
            return SessionOutcome(live=generation.live, how=generation.how, last_frame=frames[-1] if frames else None)
        if self.store is None:
            return None
        with self._store_errors():
            record = await self.store.load(owner, session_id)
            if record is None:
                return None
            if record.live and not record.producer_alive:
                await self.persistence.end_orphan(record)
                record = await self.store.load(owner, session_id) or record
            last = await self.store.read_frames(record.gen_id, max(0, record.count - 1)) if record.count else []
        return SessionOutcome(live=record.live, how=record.how, last_frame=last[-1] if last else None)

    # --- starting a generation -------------------------------------------------------------------
    async def start_detached(self, call: StreamCall, request: RequestContext, *, stream: EngineStream | None = None,
                             holds_admission: bool = True) -> Generation:
        """A generation run by a task of its own, for no client (a background run; later a batch line).

        Followers attach by resuming it; it is never stopped for lack of clients, only by a
        cancel, the engine, or the gateway stopping. ``stream``: its engine stream, already
        open (the caller opened it, so an engine refusal was the caller's own answer).
        ``call.on_complete`` tells the caller how it ended (also when the engine refused it).
        It takes an admission slot of its owner until it ends, unless ``holds_admission=False``
        (the caller took one already). ``request``: the request that asked for it; the run
        keeps only who and which request (``RequestContext.detached``).
        """
        generation = await self._new_generation(call, request, holds_admission=holds_admission, with_client=False)
        generation.detached = True
        run = self._run(generation, call, request.detached(), stream=stream)
        self._spawn(run.run(), "session-run")
        return generation

    def _run(self, generation: Generation, call: StreamCall, request: RequestContext, *,
             stream: EngineStream | None = None) -> Run:
        """The run producing ``generation``: its events into the log, and to the starting client if any."""
        run = Run(call, request, self.relay, LogSink(generation, self._hooks), stream=stream,
                  on_client_left=lambda: self._client_left(generation))
        generation.run = run
        trace = trace_of(request)  # (kept beyond the run: the store's last writes come after it)
        generation.trace = trace if trace is not None and trace.recording else None
        return run

    def _check_room(self, owner: str) -> None:
        """Unavailable while the store is too far behind, a limit when ``owner`` has its most live sessions."""
        if self._stopping:
            raise Unavailable("the gateway is shutting down", code="shutting_down")
        backlog = self.persistence.writer.backlog_bytes if self.persistence is not None else 0
        if backlog > self.settings.session_max_unpersisted_bytes:
            raise Unavailable(f"the session store is behind: {backlog} bytes of events are not persisted "
                              "yet; new streams wait until it catches up",
                              code="session_store_unavailable", retry_after=1)
        live_cap = self.settings.max_live_sessions_per_key or default_live_cap(self.settings)
        if self._live_by_owner.get(owner, 0) >= live_cap:
            raise LimitReached(f"this API key is at its limit of {live_cap} live sessions (generations that "
                               "run on after their client left count until they end)",
                               code="too_many_sessions", retry_after=1)

    async def _new_generation(self, call: StreamCall, request: RequestContext, *, holds_admission: bool = False,
                              with_client: bool = True) -> Generation:
        owner = request.key_id
        self._check_room(owner)
        named = call.is_named
        key = SessionKey(owner, call.session_id or new_session_id())
        current = self._generations.get(key)
        if current is not None and current.live:
            raise R.busy(key.session_id)
        generation = Generation(
            key, named=named, ring_size=self.settings.session_ring_size, persistent=self.store is not None,
            dialect=call.dialect, choices=call.choices, model=call.model or "unknown", request_id=request.request_id)
        if holds_admission:  # no request holds a slot for it: it takes one of its own, until it ends
            refusal = self.admission.try_enter(owner) if self.admission is not None else None
            if refusal is not None:
                raise LimitReached(refusal, code="too_many_requests", retry_after=1)
            if self.admission is not None:
                admission = self.admission
                generation.on_no_longer_live = lambda: admission.leave(owner)
        generation.counted_live = True
        self._live_by_owner[owner] = self._live_by_owner.get(owner, 0) + 1
        self._register(generation)
        if named and self.store is not None:
            # Another replica may be producing this session id right now: ask the store.
            try:
                with self._store_errors():
                    claimed = await self.store.claim(NewGeneration(key.owner, key.session_id, generation.gen_id, True,
                                                                   dialect=call.dialect.name))
            except Failure:
                self._no_longer_live(generation)
                self._forget(generation)
                raise
            if not claimed:
                self._no_longer_live(generation)
                self._forget(generation)
                raise R.busy(key.session_id)
            generation.stored = True
        if with_client:
            generation.attach()
        return generation

    def _follower(self, feed, start: int, session_id: str, keepalive: float, dialect: StreamDialect) -> Response:
        return FollowerResponse(feed=feed, start=start, session_id=session_id, keepalive_seconds=keepalive,
                                dialect=dialect)

    # --- registry -------------------------------------------------------------------------------
    def _register(self, generation: Generation) -> None:
        old = self._generations.get(generation.key)
        if old is not None:
            old.replaced = True
            self._by_gen.pop(old.gen_id, None)
            self._unfinish(generation.key)
        self._generations[generation.key] = generation
        self._by_gen[generation.gen_id] = generation

    def _forget(self, generation: Generation) -> None:
        if self._generations.get(generation.key) is generation:
            del self._generations[generation.key]
            self._unfinish(generation.key)
        self._by_gen.pop(generation.gen_id, None)

    async def _refused(self, generation: Generation) -> None:
        """The engine refused the request: the client gets the HTTP error, and nothing stays to resume."""
        self._no_longer_live(generation)
        generation.replaced = True  # never written by the store writer
        self._forget(generation)
        if generation.stored:
            try:
                await self.store.discard(generation.gen_id)
            except Exception:
                log.exception("could not discard a refused session")

    def _generation_ended(self, generation: Generation) -> None:
        self._no_longer_live(generation)
        if generation.replaced:
            return
        if self.store is None:
            finished = self._finished.setdefault(generation.key.owner, OrderedDict())
            finished[generation.key] = generation
            while len(finished) > self.settings.session_memory_max_finished:
                _, oldest = finished.popitem(last=False)
                self._forget(oldest)
        self._evict_if_idle(generation)

    def _unfinish(self, key: SessionKey) -> None:
        finished = self._finished.get(key.owner)
        if finished is not None:
            finished.pop(key, None)
            if not finished:
                del self._finished[key.owner]

    def _no_longer_live(self, generation: Generation) -> None:
        """Its owner's live-session count goes down, once (the ending or the refusal, whichever first)."""
        if generation.counted_live:
            generation.counted_live = False
            owner = generation.key.owner
            left = self._live_by_owner[owner] - 1
            if left:
                self._live_by_owner[owner] = left
            else:
                del self._live_by_owner[owner]
            if generation.on_no_longer_live is not None:
                generation.on_no_longer_live()

    def _ending_written(self, generation: Generation) -> None:
        self._evict_if_idle(generation)

    def _fenced(self, generation: Generation) -> None:
        """Another replica ended this generation (it took us for dead) or replaced it: stop."""
        if generation.live:
            log.warning("session taken over in the store; stopping its generation here",
                        extra={"session_id": generation.session_id})
            generation.stop(FENCED)
        self._evict_if_idle(generation)

    def _evict_if_idle(self, generation: Generation) -> None:
        """With a store, a finished generation nobody follows leaves memory once fully persisted."""
        if self.store is not None and not generation.live and generation.ending_stored and not generation.consumers:
            self._forget(generation)

    # --- clients leaving ---------------------------------------------------------------------------
    def _client_left(self, generation: Generation) -> None:
        if not generation.detach():
            return
        if not generation.live:
            self._evict_if_idle(generation)
            return
        generation.unanswered_since = None
        delay = self.settings.cancel_after_disconnect_seconds if generation.named else 0.0
        if delay > 0:
            generation.disconnect_timer = asyncio.get_running_loop().call_later(delay, self._alone_too_long, generation)
        else:
            self._alone_too_long(generation)

    def _alone_too_long(self, generation: Generation) -> None:
        generation.disconnect_timer = None
        if generation.consumers or not generation.live or generation.detached:
            return
        if not generation.named:
            generation.stop(CLIENT_DISCONNECTED)  # plain OpenAI semantics: abort at once
        elif self.store is not None and generation.stored:
            self._spawn(self._stop_unless_followed_elsewhere(generation), "session-disconnect-check")
        else:
            generation.stop(DISCONNECT_TIMEOUT)

    async def _stop_unless_followed_elsewhere(self, generation: Generation) -> None:
        try:
            followed: bool | None = await self.store.has_listener(generation.gen_id)
        except Exception:
            followed = None  # the store could not say
        if generation.consumers or not generation.live:
            return
        loop = asyncio.get_running_loop()
        if followed is None:
            # A store that cannot answer is no proof that nobody follows (a follower on another
            # replica renews its lease through that same store): ask again, for as long as a
            # follower's lease lasts; a store failing longer than that stops it as unfollowed.
            since = generation.unanswered_since = generation.unanswered_since or loop.time()
            followed = loop.time() - since < self.persistence.listener_lease
        else:
            generation.unanswered_since = None
        if followed:
            generation.disconnect_timer = loop.call_later(self.persistence.check_interval, self._alone_too_long,
                                                          generation)
        else:
            generation.stop(DISCONNECT_TIMEOUT)

    def cancel_requested_elsewhere(self, gen_id: int) -> None:
        generation = self._by_gen.get(gen_id)
        if generation is not None and generation.live:
            generation.stop(CANCEL_REQUEST)

    # --- the store side -----------------------------------------------------------------------------
    async def _read_evicted(self, generation: Generation, index: int) -> list[bytes]:
        """Events that left a local ring: from the store, or a clear failure without one."""
        if self.persistence is None:
            raise FeedBroken(f"events from index {index} were evicted before this client read them "
                             f"(SESSION_RING_SIZE={self.settings.session_ring_size})", code="events_evicted")
        return await self.persistence.read_evicted(generation, index)

    async def _load(self, owner: str, session_id: str):
        if self.persistence is None:
            raise R.unknown(session_id)
        return await self.persistence.load(owner, session_id)

    async def _wait_remote_end(self, record):
        deadline = time.monotonic() + REMOTE_CANCEL_WAIT_SECONDS
        while record.live and time.monotonic() < deadline:
            await asyncio.wait((self.store.signal(record.gen_id),), timeout=0.05)
            record = await self._load(record.owner, record.session_id)
        return record

    # --- maintenance -----------------------------------------------------------------------------
    def _producing(self) -> bool:
        """Whether this process produces any live generation."""
        return any(generation.live for generation in self._by_gen.values())

    async def collect_garbage(self) -> None:
        """Forget finished generations older than the TTL; end generations whose producer died."""
        cutoff = time.time() - self.settings.sessions_ttl_seconds
        for generation in list(self._generations.values()):
            if (not generation.live and not generation.consumers and generation.ended_at is not None
                    and generation.ended_at < cutoff):
                self._forget(generation)
        if self.store is not None:
            for record in await self.store.orphans():
                await self.persistence.end_orphan(record)
            await self.store.expire(self.settings.sessions_ttl_seconds)

    # --- introspection (tests) ---------------------------------------------------------------------
    def local(self, owner: str, session_id: str) -> Generation | None:
        return self._generations.get(SessionKey(owner, session_id))


def _ignore(generation: Generation) -> None:
    return None


class StoreFailures:
    """A store that fails is a 503 for the client, never a 500, and a few log lines, not one per request.

    The first failure is logged with its traceback; while failures go on, one line a minute says
    how long and how many requests were refused; the next success says the store is back.
    """

    def __init__(self) -> None:
        self.since: float | None = None
        self.logged_at = 0.0
        self.refused = 0

    @contextlib.contextmanager
    def guard(self):
        try:
            yield
        except Failure:
            raise
        except Exception as exc:
            self._failed()
            raise R.store_unavailable() from exc
        if self.since is not None:
            log.warning("session store available again", extra={
                "seconds": round(time.monotonic() - self.since), "requests_refused": self.refused})
            self.since = None

    def _failed(self) -> None:
        now = time.monotonic()
        self.refused = self.refused + 1 if self.since is not None else 1
        if self.since is None:
            self.since = self.logged_at = now
            log.exception("session store unavailable")
        elif now - self.logged_at >= STORE_FAILURE_LOG_SECONDS:
            self.logged_at = now
            log.error("session store still unavailable", extra={
                "seconds": round(now - self.since), "requests_refused": self.refused})
