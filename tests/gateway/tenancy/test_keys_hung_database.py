"""Keys while a real PostgreSQL hangs (frozen with SIGSTOP: connections stay open, nothing answers).

The resolver's bounds must hold against the real driver: a cached key being confirmed answers
from the cache after ``CONFIRM_TIMEOUT_SECONDS``, a new key gets its 503 after
``LOOKUP_TIMEOUT_SECONDS``, a poll fails after ``POLL_TIMEOUT_SECONDS``. SQLAlchemy's asyncpg
adapter closes a connection whose query was cancelled with a grace of 2 s of its own
(``close(timeout=2)``, then terminate); awaited inside those bounds, it made each of them 2 s
longer: on two replicas sharing a hung database every request of a cached key waited 3 s
instead of 1 s, a new key's 503 came after 7 s instead of 5 s.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from gateway.database.engine import create_engine
from gateway.database.migrations import runner
from gateway.tenancy import resolver as resolver_module
from gateway.tenancy.errors import StoreUnavailable
from gateway.tenancy.resolver import KeyResolver
from gateway.tenancy.store import KeyStore

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

SLACK = 0.6  # the machine's own delays (2 cores, shared); the old code overshot each bound by 2 s


async def test_every_bound_of_the_key_cache_holds_while_postgresql_hangs(stoppable_postgres, monkeypatch):
    monkeypatch.setattr(resolver_module, "POLL_TIMEOUT_SECONDS", 0.5)
    monkeypatch.setattr(resolver_module, "LOOKUP_TIMEOUT_SECONDS", 1.0)
    confirm = resolver_module.CONFIRM_TIMEOUT_SECONDS
    url = stoppable_postgres.server.database_url("postgres")
    await asyncio.to_thread(runner.upgrade, url)
    engine = create_engine(url)
    store = KeyStore(engine)
    resolver = KeyResolver(store, poll_interval=0.25)
    await resolver.start()
    try:
        record, secret = await store.create_key(name="cached", role="read")
        await resolver.changed()  # (as the admin route does: the creation's new version is seen before the key is cached)
        assert (await resolver.resolve(secret)).id == record.id  # cached, and the replica polls from now on
        # Every pooled connection has served a query: each is one the driver must clean up once cut off.
        await asyncio.gather(*(store.version() for _ in range(4)))
        stoppable_postgres.freeze()
        frozen_at = time.monotonic()

        # A cached key, once its last confirmation is stale, is asked again and answered from the cache.
        await asyncio.sleep(max(0.0, resolver_module.STALE_AFTER_SECONDS - (time.monotonic() - frozen_at)))
        started = time.monotonic()
        assert (await resolver.resolve(secret)).id == record.id
        assert time.monotonic() - started < confirm + SLACK, f"a cached key waited {time.monotonic() - started:.2f} s"

        # A token not in the cache: its 503 within the lookup's bound (or at once, once the store is down).
        started = time.monotonic()
        with pytest.raises(StoreUnavailable):
            await resolver.resolve(secret[:-1] + ("A" if secret[-1] != "A" else "B"))
        waited = time.monotonic() - started
        assert waited < resolver_module.LOOKUP_TIMEOUT_SECONDS + SLACK, f"a new key waited {waited:.2f} s"

        # Two failed polls mark the store down: within two poll bounds (and the intervals between).
        deadline = frozen_at + 2 * (resolver_module.POLL_TIMEOUT_SECONDS + resolver.poll_interval) + SLACK + 1.5
        while not resolver.store_down:
            assert time.monotonic() < deadline, f"not down {time.monotonic() - frozen_at:.2f} s after the hang"
            await asyncio.sleep(0.05)
        started = time.monotonic()
        assert (await resolver.resolve(secret)).id == record.id  # down: the cache, no wait at all
        assert time.monotonic() - started < 0.1
    finally:
        stoppable_postgres.thaw()
        await resolver.stop()
        await engine.dispose()
