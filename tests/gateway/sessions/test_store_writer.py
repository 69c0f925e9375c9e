"""The store writer when the store fails: readers never wait for it, retries back off, held events are bounded.

A long session on a store that fails or hangs (the playground's 30,000-token Stop test ran behind
one: "session store write failed; retrying" on every flush) must cost persistence only: its
clients are fed from memory, the writer retries with a backoff instead of at a fixed pace, and
the events it holds for the store are bounded (``SESSION_MAX_HELD_BYTES``): past the bound it
gives up on the generations holding the most, and the store's copy of each ends with an
explicit error event where it stops.
"""

from __future__ import annotations

import asyncio

import orjson
import pytest

from gateway.protocols.openai.dialect import OPENAI
from gateway.sessions.generation import Generation, SessionKey
from gateway.sessions.writer import StoreWriter
from tests.support.bodies import stream_body as chat
from tests.support.sse_client import fresh_client, read_stream
from tests.support.waiting import until

DEADLINE = 60.0  # only so that a hang fails the test instead of hanging it


class Failing:
    """A store whose writes fail (a locked or full database), counted."""

    def __init__(self) -> None:
        self.attempts = 0
        self.batches = []

    async def write(self, batch):
        self.attempts += 1
        self.batches.append(batch)
        raise OSError("database is locked")


def generation(ring_size: int = 16) -> Generation:
    return Generation(SessionKey("owner", "long"), named=True, ring_size=ring_size, persistent=True, dialect=OPENAI)


def append_events(gen: Generation, count: int) -> None:
    start = gen.log.next_index
    gen.log.append([b"id: long:%d\ndata: {\"n\": %d}\n\n" % (i, i) for i in range(start, start + count)])


async def test_failed_writes_back_off_to_a_ceiling_pack_each_event_once_and_the_first_success_resets_the_pace():
    store = Failing()
    writer = StoreWriter(store, interval=0.05, on_written=lambda g: None, on_fenced=lambda g: None)
    gen = generation()
    delays = []
    for _ in range(7):
        append_events(gen, 10)
        writer.mark(gen)
        await writer.flush()
        delays.append(writer.retry_delay)
    assert delays == [0.25, 0.5, 1.0, 2.0, 4.0, 5.0, 5.0]  # not one attempt a second for as long as it lasts
    assert store.attempts == 7 and gen.log.persisted == 0  # every attempt carried everything not yet written
    # ... packed once: a retry packs only what came since the last attempt, not the whole backlog again
    assert [c.first_idx for c in store.batches[-1].chunks] == [0, 10, 20, 30, 40, 50, 60]
    assert all(a is b for a, b in zip(store.batches[-1].chunks[:-1], store.batches[-2].chunks, strict=True))

    written = []

    async def write(batch):
        written.append(batch)
        return set()

    store.write = write
    await writer.flush()  # (still dirty from the last failure)
    assert writer.retry_delay == 0.0 and writer.backlog_bytes == 0
    assert gen.log.persisted == 70 and [c.first_idx for c in written[0].chunks] == [0, 10, 20, 30, 40, 50, 60]


async def test_held_events_are_bounded_and_the_store_copy_ends_explicitly_where_it_stops(sqlite_store):
    gen = generation(ring_size=16)
    writer = StoreWriter(sqlite_store, interval=0.05, on_written=lambda g: None, on_fenced=lambda g: None,
                         max_held_bytes=4096)
    append_events(gen, 10)
    writer.mark(gen)
    await writer.flush()  # the store works: events 0-9 are persisted
    assert gen.log.persisted == 10

    real_write = sqlite_store.write
    sqlite_store.write = Failing().write
    reader = type("Reader", (), {"position": 12})()  # a client attached at index 12, reading slowly
    gen.log.readers.add(reader)
    for _ in range(40):  # the store stays down while the stream goes on: ~100 KB of events
        append_events(gen, 100)
        writer.mark(gen)
        await writer.flush()
    log = gen.log
    assert log.lost_from == 10  # given up on: the store's copy stops after what it had
    assert log.read_from(12)[:1] == [b"id: long:12\ndata: {\"n\": 12}\n\n"]  # the slow client still gets it all
    gen.log.release(reader)
    assert len(log.frames) <= 16 + 16  # then memory holds the ring (and its trimming slack), not the backlog
    assert writer.backlog_bytes > 4096  # new streams are still refused until the store is back

    sqlite_store.write = real_write
    await writer.flush()
    assert writer.backlog_bytes == 0 and gen.ending_stored
    stored = await sqlite_store.read_frames(gen.gen_id, 0)
    assert [orjson.loads(f.split(b"data: ", 1)[1])["n"] for f in stored[:10]] == list(range(10))
    ending = stored[10:]
    assert ending[0].startswith(b"id: long:10\n") and b"session_events_not_persisted" in ending[0]
    assert ending[-1] == b"id: long:%d\ndata: [DONE]\n\n" % (10 + len(ending) - 1)
    record = await sqlite_store.load("owner", "long")
    assert record.status == "ended" and record.how == "error" and record.count == 10 + len(ending)

    append_events(gen, 5)  # the generation goes on in memory; the store's copy stays ended
    writer.mark(gen)
    await writer.flush()
    assert await sqlite_store.read_frames(gen.gen_id, 0) == stored


async def test_a_store_that_never_answers_holds_up_no_reader_of_a_long_session(gateway, fake_engine):
    """Every write hangs (a locked file): the session's own client and a follower get all of a long
    stream from memory, while the writer times out, backs off and finally gives up on its events."""
    fake_engine.hold = asyncio.Event()
    fake_engine.hold_after = 3
    tokens = 3000
    async with gateway(session_store_timeout_seconds=0.5, session_max_held_bytes=64 * 1024,
                       cancel_after_disconnect_seconds=30) as (base, app), \
            fresh_client(base) as client, fresh_client(base) as other:
        store = app.state.sessions.store

        async def hanging_write(batch):
            await asyncio.sleep(3600)

        store.write = hanging_write  # (bounded by SESSION_STORE_TIMEOUT_SECONDS, like every store call)
        live = []
        first = asyncio.create_task(read_stream(client, "POST", "/v1/chat/completions",
                                                json=chat(tokens, session_id="long-1"), live=live, timeout=DEADLINE))
        await until(lambda: len(live) >= 3, DEADLINE, what="the first events")
        follower_live = []
        follower = asyncio.create_task(read_stream(other, "GET", "/v1/sessions/long-1/events", live=follower_live,
                                                   timeout=DEADLINE))
        await until(lambda: len(follower_live) >= 3, DEADLINE, what="the follower attached")
        fake_engine.hold.set()
        async with asyncio.timeout(DEADLINE):
            got, followed = await asyncio.gather(first, follower)
        writer = app.state.sessions.persistence.writer
        await until(lambda: writer.gave_up >= 1, DEADLINE, what="the writer giving up on the held events")
    assert got.status == 200 and got.dones == 1 and not got.cut
    assert got.indices == list(range(tokens + 2))  # role chunk, every token, [DONE]: nothing held back
    assert [e.data for e in followed.events] == [e.data for e in got.events]


async def test_what_failed_attempts_packed_reads_back_whole_once_the_store_takes_it(sqlite_store):
    gen = generation()
    writer = StoreWriter(sqlite_store, interval=0.05, on_written=lambda g: None, on_fenced=lambda g: None)
    real_write = sqlite_store.write
    sqlite_store.write = Failing().write
    for _ in range(3):
        append_events(gen, 10)
        writer.mark(gen)
        await writer.flush()
    sqlite_store.write = real_write
    append_events(gen, 5)
    writer.mark(gen)
    await writer.flush()
    stored = await sqlite_store.read_frames(gen.gen_id, 0)
    assert [orjson.loads(f.split(b"data: ", 1)[1])["n"] for f in stored] == list(range(35))
    assert gen.log.persisted == 35
