"""A bearer token to its database key, through a cache that every replica drops within a second of a change.

Invalidation is a **version counter polled every ``KEY_CACHE_POLL_SECONDS`` (0.25 s)**: every
change of a key or team raises ``gateway_state.version`` in the same transaction
(``store.KeyStore``), and each replica reads that one row; a new value drops the whole cache.
A replica polls only once it has something the counter guards: a database key found by a
lookup, a change made through it (``changed``), or the database found down (the polls tell
when it is back). Until then its cache holds no key, only tokens known to be no key, which no
change can make valid (secrets are the gateway's own random ones), so a gateway whose callers
use configured keys only pays no poll at all. A token not in the cache is looked up in the
database whether or not it polls, so a key created on another replica works here at once.
Chosen over Redis pub/sub because a counter is state, not a message: a replica whose
connection blinked catches up at its next poll, where a missed publish would leave a revoked
key working until the next change; and the counter commits with the change itself, so no
failure between "changed" and "announced" can leave them apart. It needs no Redis, so keys
behave the same with in-process limits. Its cost, once a replica polls, is one indexed one-row read
every 0.25 s.

So a revoked key is refused on every replica within one poll interval plus the poll's own
time. Expiry (a key's ``expires_at``, a rotated-out secret's grace end) needs no
invalidation: it is checked against the clock at every use.

When the database cannot be reached: a key already in the cache keeps working (no revocation
can be committed meanwhile; a replica cut off from a database that others still reach is the
exception, see docs/keys.md), a token not in the cache gets ``StoreUnavailable`` at once (503),
without a wait per request. "Cannot be reached" means ``DOWN_AFTER_FAILED_POLLS`` polls in a row
failed: one poll slower than ``POLL_TIMEOUT_SECONDS`` on a loaded machine (SQLite behind a busy
writer, a pool briefly empty) is a slow database, not a dead one, and refusing every new key for
it turned a load spike into 503s. A token not in the cache waits up to ``LOOKUP_TIMEOUT_SECONDS``
for its lookup for the same reason; a cached key being confirmed waits ``CONFIRM_TIMEOUT_SECONDS``
and then keeps its cached answer. Wrong tokens are cached as unknown too (bounded), so guessing
costs no query after the first, and lookups that miss run at most ``LOOKUP_CONCURRENCY`` at once; requests
presenting the same token at once share one lookup (a new key's first burst makes one query, not one each).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from gateway.tenancy.errors import StoreUnavailable
from gateway.tenancy.ids import looks_like_key, secret_digest
from gateway.tenancy.model import ResolvedKey, utcnow
from gateway.tenancy.store import KeyStore

log = logging.getLogger("gateway.keys")

STALE_AFTER_SECONDS = 1.0  # a cached answer older than this since the last good poll is asked again
LOOKUP_CONCURRENCY = 16
CONFIRM_TIMEOUT_SECONDS = 1.0  # a cached key's re-check: slower, and the cached answer stands
LOOKUP_TIMEOUT_SECONDS = 5.0  # a token not cached: slower, and the request is a 503 (nothing to fall back on)
POLL_TIMEOUT_SECONDS = 2.0  # a version poll slower than this failed
DOWN_AFTER_FAILED_POLLS = 2  # failed polls in a row that mark the database down
_UNKNOWN = object()


class KeyResolver:
    def __init__(self, store: KeyStore, *, poll_interval: float = 0.25, max_entries: int = 10_000,
                 clock=utcnow, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.poll_interval = poll_interval
        self.max_entries = max_entries
        self.clock = clock
        self.monotonic = monotonic
        self._cache: dict[str, object] = {}  # digest -> ResolvedKey or _UNKNOWN
        self._version: int | None = None
        self._confirmed_at = float("-inf")  # when the last poll succeeded (monotonic)
        self.store_down = False
        self._failed_polls = 0  # in a row
        self._lookups = asyncio.Semaphore(LOOKUP_CONCURRENCY)
        self._pending: dict[str, asyncio.Future] = {}  # digest -> its lookup under way
        self._poller: asyncio.Task | None = None
        self._stopping = asyncio.Event()
        self._started = False
        self.polling = False  # from the first key seen (or change, or outage) on; see the module's docstring

    async def resolve(self, token: str) -> ResolvedKey | None:
        """The valid key behind ``token``, or None; ``StoreUnavailable`` when it cannot be known now."""
        if not looks_like_key(token):
            return None
        digest = secret_digest(token)
        cached = self._cache.get(digest)
        if cached is not None and (self.store_down or self.monotonic() - self._confirmed_at < STALE_AFTER_SECONDS
                                   or not self.polling):  # (not polling: only tokens that are no key are cached)
            found = cached
        elif self.store_down:
            raise StoreUnavailable("the gateway's database is unavailable: this key cannot be checked now")
        else:
            found = await self._shared_lookup(digest, cached)
        if found is _UNKNOWN or not found.valid_at(self.clock()):  # type: ignore[union-attr]
            return None
        return found  # type: ignore[return-value]

    async def _shared_lookup(self, digest: str, cached: object | None) -> object:
        """One query for a token however many requests present it at once (a new key's first burst)."""
        pending = self._pending.get(digest)
        if pending is None:
            pending = self._pending[digest] = asyncio.ensure_future(self._lookup(digest, cached))
            pending.add_done_callback(lambda _: self._pending.pop(digest, None))
        return await asyncio.shield(pending)

    async def _lookup(self, digest: str, cached: object | None) -> object:
        version = self._version
        try:
            # One bound for the wait for a lookup slot and the lookup: with the database hanging,
            # the lookups ahead hold every slot, and a wait per slot would add up.
            async with asyncio.timeout(LOOKUP_TIMEOUT_SECONDS if cached is None else CONFIRM_TIMEOUT_SECONDS):
                async with self._lookups:
                    if self.store_down and cached is None:  # (found down while this one waited)
                        raise StoreUnavailable("down")
                    if not self.polling:
                        # The version this replica holds is the one it read at start (or its last poll):
                        # any change since, through another replica, would make the first poll drop the
                        # key found here at once (a key used a moment before the database hangs then
                        # gets 503s on this replica). Read it first: the key is cached under the version
                        # it was found at. (Until then the cache holds only tokens that are no key.)
                        version = self._version = await self.store.version()
                    key = await self.store.resolve(digest)
        except (StoreUnavailable, TimeoutError):
            self._poll_from_now()  # (the polls tell when it answers again)
            if cached is not None:
                return cached
            raise StoreUnavailable("the gateway's database is unavailable: this key cannot be checked now") from None
        if key is not None:
            self._poll_from_now()  # a key is cached from now on: its revocation must reach this replica
        found = _UNKNOWN if key is None else key
        if version == self._version:  # no change seen since the lookup began: the answer may be kept
            if len(self._cache) >= self.max_entries:
                self._cache.pop(next(iter(self._cache)))
            self._cache[digest] = found
        return found

    async def refresh(self) -> None:
        """One poll: read the version; a new one drops the cache. Failed polls in a row mark the store down."""
        try:
            async with asyncio.timeout(POLL_TIMEOUT_SECONDS):
                version = await self.store.version()
        except (StoreUnavailable, TimeoutError):
            self._failed_polls += 1
            self._poll_from_now()
            if self._failed_polls < DOWN_AFTER_FAILED_POLLS:
                return
            if not self.store_down:
                log.warning("the gateway's database is unreachable: known keys keep working from the cache, "
                            "unknown ones are refused (503) until it answers again")
            self.store_down = True
            return
        self._failed_polls = 0
        if version != self._version:
            self._cache.clear()
            self._version = version
        if self.store_down:
            log.warning("the gateway's database answers again: keys are checked against it")
        self.store_down = False
        self._confirmed_at = self.monotonic()

    async def changed(self) -> None:
        """A key or team was changed through this replica: its cache follows at once, and polls from now on."""
        self._poll_from_now()
        await self.refresh()

    def _poll_from_now(self) -> None:
        self.polling = True
        if self._started and self._poller is None and not self._stopping.is_set():
            self._poller = asyncio.create_task(self._poll(self._stopping), name="key-cache-poller")

    async def _poll(self, stopping: asyncio.Event) -> None:
        while True:
            await self.refresh()  # (the first at once: what was cached before the polls began is confirmed)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.poll_interval):
                    await stopping.wait()
            if stopping.is_set():
                return

    async def start(self) -> None:
        if self._started:
            return
        self._stopping = asyncio.Event()
        self._started = True
        await self.refresh()  # (the store down at start: polls from now on)
        if self.polling:  # (started again after a stop)
            self._poll_from_now()

    async def stop(self) -> None:
        """Stop polling; a poll under way finishes first (a query cancelled half-way can strand its connection)."""
        self._stopping.set()
        if self._poller is not None:
            await self._poller
            self._poller = None
        self._started = False
