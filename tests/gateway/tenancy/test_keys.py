"""Keys in the database: stored as digests, resolved through the cache, revoked everywhere within a second, rotated with grace."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import time

import pytest
import sqlalchemy as sa

from gateway.database.engine import create_engine
from gateway.database.tables.tenancy import key_secrets, keys
from gateway.tenancy.errors import Conflict, NotFound, StoreUnavailable
from gateway.tenancy.ids import looks_like_key
from gateway.tenancy.model import Limits
from gateway.tenancy.resolver import KeyResolver
from gateway.tenancy.store import KeyStore


class Clock:
    def __init__(self) -> None:
        self.now = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)

    def __call__(self) -> dt.datetime:
        return self.now


@contextlib.asynccontextmanager
async def replica(url: str, *, clock=None, poll_interval: float = 0.25):
    """What one gateway replica has of the keys: its own engine, store and resolver (polling)."""
    engine = create_engine(url)
    store = KeyStore(engine, **({"clock": clock} if clock else {}))
    resolver = KeyResolver(store, poll_interval=poll_interval, **({"clock": clock} if clock else {}))
    await resolver.start()
    try:
        yield store, resolver
    finally:
        await resolver.stop()
        await engine.dispose()


async def test_a_key_is_stored_as_a_digest_and_shown_by_its_prefix(migrated):
    async with replica(migrated) as (store, resolver):
        record, secret = await store.create_key(name="ci", role="app", limits=Limits(rpm=5))
        assert looks_like_key(secret) and record.prefix == secret[:12]
        async with store.engine.connect() as db:
            stored = [tuple(row) for table in (keys, key_secrets)
                      for row in (await db.execute(sa.select(table))).all()]
        assert stored and all(secret not in str(row) for row in stored)
        resolved = await resolver.resolve(secret)
        assert (resolved.id, resolved.role, resolved.limits.rpm) == (record.id, "app", 5)
        assert await resolver.resolve(secret[:-1] + ("A" if secret[-1] != "A" else "B")) is None


async def test_a_key_carries_its_teams_limits_band_and_weight(migrated):
    async with replica(migrated) as (store, resolver):
        team = await store.create_team(name="search", limits=Limits(tpm=1000), priority="batch", weight=2.0)
        record, secret = await store.create_key(name="k", role="read", team_id=team.id, models=["m1"])
        resolved = await resolver.resolve(secret)
        assert resolved.team.id == team.id and resolved.team.limits.tpm == 1000
        assert (resolved.priority, resolved.weight, resolved.models) == ("batch", 2.0, ("m1",))
        with pytest.raises(NotFound):
            await store.create_key(name="k", role="read", team_id="team_0000000000000000")


async def test_a_revoked_key_is_refused_by_another_replica_within_a_second(migrated):
    async with replica(migrated) as (admin, _), replica(migrated) as (_, other):
        record, secret = await admin.create_key(name="k", role="read")
        assert await other.resolve(secret) is not None  # now in the other replica's cache
        await admin.revoke_key(record.id)
        revoked_at = time.monotonic()
        async with asyncio.timeout(1.0):  # the contract itself: refused everywhere within 1 s
            while await other.resolve(secret) is not None:
                await asyncio.sleep(0.01)
        assert time.monotonic() - revoked_at < 1.0


async def test_any_change_drops_the_cache_at_the_next_poll(migrated):
    async with replica(migrated, poll_interval=3600) as (store, resolver):
        record, secret = await store.create_key(name="k", role="read", limits=Limits(rpm=1))
        assert (await resolver.resolve(secret)).limits.rpm == 1
        await store.update_key(record.id, {"limits": Limits(rpm=9)})
        await resolver.refresh()
        assert (await resolver.resolve(secret)).limits.rpm == 9


async def test_rotation_keeps_the_old_secret_for_the_grace_period_only(migrated):
    clock = Clock()
    async with replica(migrated, clock=clock, poll_interval=3600) as (store, resolver):
        record, old = await store.create_key(name="k", role="read")
        rotated, new = await store.rotate_key(record.id, grace=dt.timedelta(minutes=10))
        await resolver.refresh()
        assert rotated.id == record.id and rotated.prefix == new[:12] != old[:12]
        assert rotated.previous_secret_expires_at == clock.now + dt.timedelta(minutes=10)
        assert (await resolver.resolve(old)).id == (await resolver.resolve(new)).id == record.id
        clock.now += dt.timedelta(minutes=10)
        assert await resolver.resolve(old) is None
        assert await resolver.resolve(new) is not None


async def test_rotating_again_ends_the_older_secret_at_once(migrated):
    async with replica(migrated, poll_interval=3600) as (store, resolver):
        record, first = await store.create_key(name="k", role="read")
        _, second = await store.rotate_key(record.id, grace=dt.timedelta(hours=1))
        _, third = await store.rotate_key(record.id, grace=dt.timedelta(hours=1))
        await resolver.refresh()
        assert await resolver.resolve(first) is None
        assert await resolver.resolve(second) is not None and await resolver.resolve(third) is not None
        _, fourth = await store.rotate_key(record.id, grace=dt.timedelta(0))
        await resolver.refresh()
        assert await resolver.resolve(third) is None and await resolver.resolve(fourth) is not None


async def test_an_expired_key_is_refused_without_any_change_to_announce(migrated):
    clock = Clock()
    async with replica(migrated, clock=clock, poll_interval=3600) as (store, resolver):
        _, secret = await store.create_key(name="k", role="read", expires_at=clock.now + dt.timedelta(seconds=5))
        assert await resolver.resolve(secret) is not None
        clock.now += dt.timedelta(seconds=5)
        assert await resolver.resolve(secret) is None


async def test_a_revoked_key_can_be_neither_changed_nor_rotated(migrated):
    async with replica(migrated) as (store, _):
        record, _ = await store.create_key(name="k", role="read")
        await store.revoke_key(record.id)
        with pytest.raises(Conflict):
            await store.update_key(record.id, {"name": "x"})
        with pytest.raises(Conflict):
            await store.rotate_key(record.id, grace=dt.timedelta(0))


async def test_a_team_with_active_keys_cannot_be_deleted(migrated):
    async with replica(migrated) as (store, _):
        team = await store.create_team(name="t", limits=Limits())
        record, _ = await store.create_key(name="k", role="read", team_id=team.id)
        with pytest.raises(Conflict):
            await store.delete_team(team.id)
        await store.revoke_key(record.id)
        await store.delete_team(team.id)
        assert (await store.get_key(record.id)).team_id is None
        with pytest.raises(NotFound):
            await store.get_team(team.id)


async def test_pages_follow_the_ids(migrated):
    async with replica(migrated) as (store, _):
        made = sorted([(await store.create_key(name=f"k{n}", role="read"))[0].id for n in range(5)])
        first = await store.list_keys(limit=2)
        second = await store.list_keys(limit=2, after=first.next_after)
        third = await store.list_keys(limit=2, after=second.next_after)
        assert [record.id for page in (first, second, third) for record in page.items] == made
        assert third.next_after is None


class FlakyStore:
    """A key store whose database can be switched off."""

    def __init__(self, key) -> None:
        self.key = key
        self.down = False
        self.lookups = 0

    async def resolve(self, digest):
        self.lookups += 1
        if self.down:
            raise StoreUnavailable("down")
        return self.key if digest.endswith(("0", "1", "2", "3", "4", "5", "6", "7")) else None

    async def version(self):
        if self.down:
            raise StoreUnavailable("down")
        return 1


def token(last: str) -> str:
    from gateway.tenancy.ids import secret_digest

    for n in range(10_000):
        candidate = "sk-gw-" + f"{n:043d}"
        if secret_digest(candidate).endswith(last):
            return candidate
    raise AssertionError


async def test_with_the_database_down_known_keys_keep_working_and_unknown_ones_are_503_at_once():
    from gateway.tenancy.model import ResolvedKey

    key = ResolvedKey(id="key_1", name="k", role="read", team=None, models=None, limits=Limits(),
                      priority="standard", weight=1.0, expires_at=None, secret_expires_at=None)
    store = FlakyStore(key)
    resolver = KeyResolver(store)  # type: ignore[arg-type]
    await resolver.refresh()
    known = token("0")
    assert await resolver.resolve(known) is key
    store.down = True
    await resolver.refresh()
    assert not resolver.store_down  # one failed poll is a slow database, not a dead one
    await resolver.refresh()
    lookups = store.lookups
    assert resolver.store_down and await resolver.resolve(known) is key
    with pytest.raises(StoreUnavailable):
        await resolver.resolve(token("a"))
    assert store.lookups == lookups  # no query (and no wait) per request while it is down
    store.down = False
    await resolver.refresh()
    assert not resolver.store_down and await resolver.resolve(token("a")) is None


async def test_one_slow_poll_and_a_slow_lookup_do_not_refuse_a_new_key(monkeypatch):
    # Under load one poll can miss its bound and one lookup take seconds: a new key's request
    # then waits for its lookup, where it used to get a 503 (the database taken for down).
    from gateway.tenancy import resolver as resolver_module
    from gateway.tenancy.model import ResolvedKey

    monkeypatch.setattr(resolver_module, "POLL_TIMEOUT_SECONDS", 0.05)
    monkeypatch.setattr(resolver_module, "CONFIRM_TIMEOUT_SECONDS", 0.05)
    key = ResolvedKey(id="key_1", name="k", role="read", team=None, models=None, limits=Limits(),
                      priority="standard", weight=1.0, expires_at=None, secret_expires_at=None)
    store = FlakyStore(key)
    resolver = KeyResolver(store)  # type: ignore[arg-type]
    await resolver.refresh()
    slow = asyncio.Event()
    version, resolve = store.version, store.resolve

    async def slow_version():
        await slow.wait()  # never set: this poll times out
        return await version()

    store.version = slow_version
    await resolver.refresh()
    assert not resolver.store_down
    store.version = version

    async def slow_resolve(digest):  # slower than a cached key's re-check bound, within a new key's
        await asyncio.sleep(0.3)  # (a slow database, not a wait for something)
        return await resolve(digest)

    store.resolve = slow_resolve
    assert await resolver.resolve(token("0")) is key
    await resolver.refresh()  # a good poll clears the count: one more failure is again not "down"
    store.down = True
    await resolver.refresh()
    assert not resolver.store_down


async def test_wrong_tokens_cost_one_query_each_and_the_cache_stays_bounded():
    store = FlakyStore(None)
    resolver = KeyResolver(store, max_entries=100)  # type: ignore[arg-type]
    await resolver.refresh()
    wrong = token("a")
    for _ in range(5):
        assert await resolver.resolve(wrong) is None
    assert store.lookups == 1
    assert await resolver.resolve("not-a-database-key") is None and store.lookups == 1
    for n in range(300):
        await resolver.resolve("sk-gw-" + f"x{n:042d}")
    assert len(resolver._cache) <= 100


async def test_a_burst_of_requests_with_a_new_key_makes_one_query(migrated):
    async with replica(migrated) as (store, resolver):
        record, secret = await store.create_key(name="burst", role="read")
        queries = 0
        resolve = store.resolve

        async def counted(digest):
            nonlocal queries
            queries += 1
            return await resolve(digest)

        store.resolve = counted
        found = await asyncio.gather(*(resolver.resolve(secret) for _ in range(20)))
        assert {key.id for key in found} == {record.id} and queries == 1


def pollers() -> list[asyncio.Task]:
    return [task for task in asyncio.all_tasks() if task.get_name() == "key-cache-poller" and not task.done()]


async def test_a_replica_reads_nothing_by_the_clock_until_it_resolves_a_database_key(migrated):
    async with replica(migrated) as (admin, _), replica(migrated) as (_, other):
        # Neither replica has resolved a key: nothing cached to revoke, no poller (configured keys only).
        assert not other.polling and pollers() == []
        assert await other.resolve(token("a")) is None  # a wrong token: looked up, cached as no key
        assert not other.polling and pollers() == []
        record, secret = await admin.create_key(name="elsewhere", role="read")  # made through another replica
        assert (await other.resolve(secret)).id == record.id  # a miss reads the database: found at once
        assert other.polling and len(pollers()) == 1
        await admin.revoke_key(record.id)
        # Its polls see the revocation (the 1 s contract itself: the revocation test above, the same path).
        async with asyncio.timeout(30):  # (a hang guard: without polls the cached key would never be dropped)
            while await other.resolve(secret) is not None:
                await asyncio.sleep(0.01)
    assert pollers() == []  # stopped with its replica


async def test_the_first_key_a_replica_finds_stays_cached_through_its_first_poll(migrated):
    # Keys made through another replica after this one started moved the version it read at start:
    # its first poll (started by finding a key) saw a new version and dropped that key at once, so
    # a key used on it a moment before the database hung got 503s there during the outage.
    async with replica(migrated) as (admin, _), replica(migrated) as (_, other):
        record, secret = await admin.create_key(name="elsewhere", role="read")
        await admin.create_key(name="another change", role="read")
        assert (await other.resolve(secret)).id == record.id  # found: the replica polls from now on
        first_poll = other._confirmed_at
        async with asyncio.timeout(30):  # (a hang guard)
            while other._confirmed_at == first_poll:  # the poller's first poll has ended
                await asyncio.sleep(0.01)
        lookups = 0
        resolve = other.store.resolve

        async def counted(digest):
            nonlocal lookups
            lookups += 1
            return await resolve(digest)

        other.store.resolve = counted
        assert (await other.resolve(secret)).id == record.id
        assert lookups == 0, "the first poll dropped the key just found"


async def test_a_change_through_this_replica_starts_its_polls(migrated):
    async with replica(migrated) as (store, resolver):
        await store.create_key(name="k", role="read")
        assert not resolver.polling
        await resolver.changed()  # what the admin API calls after a change (tenancy.Tenancy.changed)
        assert resolver.polling and len(pollers()) == 1


async def test_a_replica_not_polling_yet_learns_an_outage_from_a_failed_lookup():
    store = FlakyStore(None)
    resolver = KeyResolver(store, poll_interval=3600)  # type: ignore[arg-type]
    await resolver.start()
    try:
        assert not resolver.polling
        store.down = True
        with pytest.raises(StoreUnavailable):
            await resolver.resolve(token("a"))
        assert resolver.polling and len(pollers()) == 1  # its polls mark the store down...
        await resolver.refresh()
        await resolver.refresh()
        assert resolver.store_down
        lookups = store.lookups
        with pytest.raises(StoreUnavailable):  # ...so the next unknown token is a 503 without a query
            await resolver.resolve(token("b"))
        assert store.lookups == lookups
        store.down = False
        await resolver.refresh()
        assert not resolver.store_down and await resolver.resolve(token("b")) is None
    finally:
        await resolver.stop()


async def test_lookups_waiting_for_a_slot_behind_a_hanging_database_are_bounded_too(monkeypatch):
    # Every lookup slot held (by lookups the database never answers): a lookup waiting for a slot
    # gets its 503 within its own bound, instead of waiting for the slot first.
    from gateway.tenancy import resolver as resolver_module

    monkeypatch.setattr(resolver_module, "LOOKUP_TIMEOUT_SECONDS", 0.2)
    store = FlakyStore(None)
    resolver = KeyResolver(store)  # type: ignore[arg-type]
    for _ in range(resolver_module.LOOKUP_CONCURRENCY):
        await resolver._lookups.acquire()  # (the hanging lookups ahead: they never give their slot back)
    with pytest.raises(StoreUnavailable):
        async with asyncio.timeout(30):  # (a hang guard: the old code waited for a slot for ever here)
            await resolver.resolve(token("a"))
    assert store.lookups == 0
