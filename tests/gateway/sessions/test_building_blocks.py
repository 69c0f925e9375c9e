"""The building blocks on their own: resume positions, the ring, frames, the SQLite store."""

from __future__ import annotations

import asyncio

import pytest

from gateway.failures import Invalid
from gateway.http.errors import http_error
from gateway.protocols.openai.dialect import DONE, OPENAI
from gateway.sessions.frames import frame, framed_block, frames, id_prefix, pack_frames, split_frames, unpack_frames
from gateway.sessions.ids import new_session_id, parse_last_event_id
from gateway.sessions.log import EventLog
from gateway.sessions.store.base import Batch, Chunk, Ending, NewGeneration
from gateway.sessions.store.sqlite import SQLiteStore, sqlite_path


# --- Last-Event-ID -------------------------------------------------------------------------------
def test_last_event_id_forms():
    assert parse_last_event_id("conv.1:7").session_id == "conv.1"
    assert parse_last_event_id("conv.1:7").next_index == 8
    assert parse_last_event_id("7", session_id="conv.1").last_index == 7
    assert parse_last_event_id("conv.1:-1").next_index == 0


@pytest.mark.parametrize("value,session", [("7", None), ("a:b", None), ("a:-2", None), ("x y:1", None),
                                           ("other:1", "mine"), (":3", None)])
def test_bad_last_event_ids_are_400s(value, session):
    with pytest.raises(Invalid) as caught:
        parse_last_event_id(value, session_id=session)
    assert http_error(caught.value).status == 400 and caught.value.param == "last_event_id"


def test_generated_ids_are_long_random_and_valid_as_client_ids():
    from gateway.sessions.ids import validate_session_id

    ids = {new_session_id() for _ in range(1000)}
    assert len(ids) == 1000
    for value in list(ids)[:50]:
        assert validate_session_id(value) == value and len(value) >= 24


# --- the ring ------------------------------------------------------------------------------------------
class Reader:
    def __init__(self, position: int) -> None:
        self.position = position


def frames_for(log: EventLog, n: int) -> list[bytes]:
    start = log.next_index
    return [frame(b"id: s:", start + i, b"data: {}") for i in range(n)]


def test_ring_keeps_indices_contiguous_and_reports_evicted_reads():
    log = EventLog(16, persistent=False)
    for _ in range(10):
        log.append(frames_for(log, 7))
    assert log.next_index == 70
    assert 16 <= len(log.frames) <= 16 + 16
    assert log.read_from(0) is None  # evicted: the caller must say so (410), never skip
    tail = log.read_from(60)
    assert [int(f.split(b"\n")[0].rpartition(b":")[2]) for f in tail] == list(range(60, 70))
    assert log.read_from(70) == []


def test_ring_never_drops_unpersisted_events_or_what_a_reader_still_needs():
    log = EventLog(16, persistent=True)
    log.append(frames_for(log, 100))
    assert log.base == 0  # nothing persisted yet
    log.mark_persisted(80)
    assert log.base == 80  # trimmed toward the ring size, but not past what is persisted
    slow = Reader(50)
    log2 = EventLog(16, persistent=False)
    log2.readers.add(slow)
    log2.append(frames_for(log2, 100))
    assert log2.base <= 50 and log2.read_from(50) is not None
    log2.release(slow)
    assert log2.base == 100 - 16


async def test_one_batch_wakes_every_waiting_reader_once():
    log = EventLog(64, persistent=False)
    waiters = [log.wait() for _ in range(5)]
    assert len({id(w) for w in waiters}) == 1  # one shared future per batch
    log.append(frames_for(log, 3))
    await asyncio.wait_for(waiters[0], 1)
    assert log.wait() is not waiters[0]


def test_stored_frames_split_back_exactly():
    prefix = id_prefix("s-1")
    framed = [frame(prefix, 0, b'data: {"a":"x\\n\\ny"}'), *frames(prefix, 1, OPENAI.error_events("bad\n\nthing", "c"))]
    assert split_frames(b"".join(framed)) == framed
    assert unpack_frames(pack_frames(framed)) == framed
    assert framed[-1] == frame(prefix, 2, DONE)


def test_rows_are_lz4_and_rows_an_earlier_version_wrote_with_zlib_still_read():
    import zlib

    framed = [frame(id_prefix("s-1"), i, b'data: {"choices":[{"delta":{"content":"w%d"}}]}' % i) for i in range(50)]
    packed = pack_frames(framed)
    assert packed.startswith(b"L4") and len(packed) < len(b"".join(framed)) / 5
    assert unpack_frames(zlib.compress(b"".join(framed), 1)) == framed  # a row written before LZ4


def test_sqlite_url_forms():
    assert sqlite_path("sqlite+aiosqlite:///./data/x.db") == "./data/x.db"
    assert sqlite_path("sqlite:////abs/x.db") == "/abs/x.db"
    for bad in ("postgresql://h/db", "sqlite:///:memory:"):
        with pytest.raises(ValueError):
            sqlite_path(bad)


# --- the SQLite store ----------------------------------------------------------------------------------
@pytest.fixture
async def two_replicas(tmp_path):
    url = f"sqlite:///{tmp_path}/s.db"
    a = SQLiteStore(url, replica="replica-a", lease_seconds=30, poll_interval=0.05)
    b = SQLiteStore(url, replica="replica-b", lease_seconds=30, poll_interval=0.05)
    await a.open()
    await b.open()
    yield a, b
    await a.close()
    await b.close()


async def test_a_live_session_cannot_be_claimed_by_another_replica(two_replicas):
    a, b = two_replicas
    assert await a.claim(NewGeneration("k", "conv", 1, True))
    assert not await b.claim(NewGeneration("k", "conv", 2, True))   # a is alive and producing
    assert await b.claim(NewGeneration("other-key", "conv", 3, True))  # another key: another session
    await a.write(Batch(chunks=[Chunk(1, 0, 1, pack_frames([frame(b"id: conv:", 0, b"data: {}"), frame(b"id: conv:", 1, DONE)]))],
                        endings=[Ending(1, "completed", 2)]))
    assert await b.claim(NewGeneration("k", "conv", 4, True))  # ended: a new generation replaces it
    record = await a.load("k", "conv")
    assert record.gen_id == 4 and record.live and record.count == 0
    assert await a.read_frames(1, 0) == []  # the old generation's events went with it


async def test_an_orphan_is_ended_exactly_once_and_live_ones_are_not_orphans(two_replicas, tmp_path):
    a, b = two_replicas
    dead = SQLiteStore(f"sqlite:///{tmp_path}/s.db", replica="replica-dead", lease_seconds=30, poll_interval=0.05)
    await dead.open()
    await dead.write(Batch(generations=[NewGeneration("k", "orphan", 7, True)],
                           chunks=[Chunk(7, 0, 0, pack_frames([frame(b"id: orphan:", 0, b"data: {}")]))]))
    await dead.retire()  # as if its heartbeat had run out
    await dead.close()
    assert await a.claim(NewGeneration("k", "alive", 8, False))
    assert [r.gen_id for r in await b.orphans()] == [7]  # a's generation is not an orphan: a is alive

    def ending(session_id, index):
        return "error", frames(id_prefix(session_id), index, OPENAI.error_events("gone", "producer_lost"))

    results = await asyncio.gather(a.end_orphan(7, ending), b.end_orphan(7, ending))
    assert sorted(results) == [False, True]
    stored = await a.read_frames(7, 0)
    assert len(stored) == 3 and stored[-1] == frame(id_prefix("orphan"), 2, DONE)
    assert not await b.end_orphan(8, ending)  # a is alive: its generation is not b's to end
    record = await b.load("k", "orphan")
    assert record.status == "ended" and record.how == "error" and record.count == 3


async def test_expiry_never_removes_a_live_generation(two_replicas):
    a, b = two_replicas
    await a.write(Batch(generations=[NewGeneration("k", "live", 1, False), NewGeneration("k", "done", 2, False)],
                        endings=[Ending(2, "completed", 0)]))
    await asyncio.sleep(0.05)  # the TTL below is shorter than this: both are "old"
    removed = await a.expire(0.01)
    assert removed == 1
    assert await a.load("k", "done") is None
    assert (await a.load("k", "live")).live


def test_frames_carry_consecutive_ids_across_the_table_of_ready_index_lines():
    framed = frames(b"id: s:", 4094, [b"data: a", b"data: b", b"data: c"])
    assert framed == [b"id: s:4094\ndata: a\n\n", b"id: s:4095\ndata: b\n\n", b"id: s:4096\ndata: c\n\n"]
    assert framed_block(b"id: s:", 7, b"data: x\n\n") == b"id: s:7\ndata: x\n\n"
    assert framed_block(b"id: s:", 123456, b"data: x\n\n") == b"id: s:123456\ndata: x\n\n"
