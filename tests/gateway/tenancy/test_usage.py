"""The usage ledger: sums in memory, written in batches, bounded while the database is down; its reports and costs."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest

from gateway.database.engine import create_engine
from gateway.tenancy.usage.ledger import UsageLedger
from gateway.tenancy.usage.prices import parse_prices
from gateway.tenancy.usage.report import usage_report


class Clock:
    def __init__(self) -> None:
        self.now = dt.datetime(2030, 5, 31, 22, 30, tzinfo=dt.UTC)

    def __call__(self) -> dt.datetime:
        return self.now


PRICES = parse_prices('{"m1": {"input": 2.0, "cached_input": 0.5, "output": 8.0}}')


@pytest.fixture
async def engine(migrated):
    engine = create_engine(migrated)
    yield engine
    await engine.dispose()


def record(ledger: UsageLedger, **values) -> None:
    ledger.record(**{"key_id": "key_a", "model": "m1", "route": "/v1/chat/completions", "prompt_tokens": 100,
                     "completion_tokens": 10, **values})


async def test_records_are_summed_per_hour_and_written_in_one_batch(engine):
    clock = Clock()
    ledger = UsageLedger(engine, prices=PRICES, clock=clock)
    record(ledger, cached_tokens=40, reasoning_tokens=3)
    record(ledger, cached_tokens=0)
    clock.now += dt.timedelta(hours=2)  # 00:30 the next day (UTC)
    record(ledger, team_id="team_t", end_user="alice")
    assert ledger.pending_rows == 2
    assert await ledger.flush() and ledger.pending_rows == 0
    start, end = clock.now - dt.timedelta(days=1), clock.now
    (by_key,) = await usage_report(engine, start=start, end=end, group_by="key")
    assert by_key | {"cost": round(by_key["cost"], 9)} == {
        "key_id": "key_a", "requests": 3, "prompt_tokens": 300, "completion_tokens": 30, "cached_tokens": 40,
        "reasoning_tokens": 3, "total_tokens": 330,
        # 260 uncached at 2.0, 40 cached at 0.5, 30 out at 8.0, per 1M
        "cost": round((260 * 2.0 + 40 * 0.5 + 30 * 8.0) / 1e6, 9)}
    days = await usage_report(engine, start=start, end=end, group_by="day")
    assert [(day["day"], day["requests"]) for day in days] == [("2030-05-31", 2), ("2030-06-01", 1)]
    users = await usage_report(engine, start=start, end=end, group_by="user")
    assert {user["end_user"]: user["requests"] for user in users} == {None: 2, "alice": 1}
    teams = await usage_report(engine, start=start, end=end, group_by="team", team_id="team_t")
    assert [(team["team_id"], team["requests"]) for team in teams] == [("team_t", 1)]


async def test_a_range_excludes_its_end_so_consecutive_ranges_never_count_an_hour_twice(engine):
    clock = Clock()  # 22:30 on 2030-05-31
    ledger = UsageLedger(engine, clock=clock)
    record(ledger)
    clock.now = dt.datetime(2030, 6, 1, 0, 10, tzinfo=dt.UTC)  # the first hour of June
    record(ledger, completion_tokens=5)
    clock.now = dt.datetime(2030, 6, 1, 1, 0, tzinfo=dt.UTC)
    record(ledger, completion_tokens=7)
    await ledger.flush()

    async def requests(start: dt.datetime, end: dt.datetime) -> list[tuple[str, int]]:
        return [(day["day"], day["requests"]) for day in await usage_report(engine, start=start, end=end,
                                                                           group_by="day")]

    may, june, july = (dt.datetime(2030, month, 1, tzinfo=dt.UTC) for month in (5, 6, 7))
    assert await requests(may, june) == [("2030-05-31", 1)]  # (was: June's first hour too)
    assert await requests(june, july) == [("2030-06-01", 2)]
    one = dt.timedelta(hours=1)
    assert await requests(june, june + one) == [("2030-06-01", 1)]  # 00:00 to 01:00: the 00:xx hour alone
    assert await requests(june + one, june + one) == [("2030-06-01", 1)]  # an instant: its own hour
    assert await requests(june - dt.timedelta(minutes=80), june + dt.timedelta(minutes=1)) == [
        ("2030-05-31", 1), ("2030-06-01", 1)]  # a range within hours: every hour it touches


async def test_two_replicas_writing_the_same_row_add_up(engine):
    clock = Clock()
    first, second = UsageLedger(engine, clock=clock), UsageLedger(engine, clock=clock)
    record(first)
    record(second, completion_tokens=5)
    await first.flush()
    await second.flush()
    (row,) = await usage_report(engine, start=clock.now, end=clock.now, group_by="model")
    assert (row["model"], row["requests"], row["completion_tokens"]) == ("m1", 2, 15)


async def test_a_row_the_database_refuses_is_dropped_alone_and_the_others_are_written(engine, caplog):
    # A value no database can hold (a lone surrogate: sqlite3 raises UnicodeEncodeError unwrapped,
    # asyncpg a DataError) used to fail every flush (the batch kept "for the next flush" forever)
    # or, unwrapped, to end the ledger's task.
    clock = Clock()
    ledger = UsageLedger(engine, clock=clock)
    record(ledger)
    record(ledger, model="m\ud800")
    record(ledger, model="m2")
    assert await ledger.flush()
    assert ledger.pending_rows == 0 and ledger.refused == 1 and ledger.failed_flushes == 0
    models = await usage_report(engine, start=clock.now, end=clock.now, group_by="model")
    assert {row["model"]: row["requests"] for row in models} == {"m1": 1, "m2": 1}
    assert "refused was dropped" in caplog.text and "kept for the next flush" not in caplog.text
    record(ledger)  # and the ledger goes on
    assert await ledger.flush()


async def test_a_database_failing_while_rows_are_written_one_by_one_keeps_the_rest_for_the_next_flush(engine):
    clock = Clock()
    ledger = UsageLedger(engine, clock=clock)
    for model in ("m1", "m\ud800", "m2", "m3"):
        record(ledger, model=model)
    write, tried = ledger._write, []

    async def failing_at_m2(batch):
        if len(batch) == 1:
            tried.append(next(iter(batch))[4])
            if tried[-1] == "m2":
                raise OSError("the database went away")
        await write(batch)

    ledger._write = failing_at_m2
    assert not await ledger.flush()
    assert tried == ["m1", "m\ud800", "m2"]  # none tried after the database failed
    assert ledger.refused == 1 and ledger.pending_rows == 2 and ledger.failed_flushes == 1
    ledger._write = write
    assert await ledger.flush() and ledger.pending_rows == 0
    models = await usage_report(engine, start=clock.now, end=clock.now, group_by="model")
    assert {row["model"]: row["requests"] for row in models} == {"m1": 1, "m2": 1, "m3": 1}


async def test_a_dead_database_keeps_the_rows_bounded_and_writes_them_when_it_is_back(tmp_path):
    clock = Clock()
    dead = create_engine(f"sqlite+aiosqlite:///{tmp_path}/missing/dir/none.db")  # cannot be opened
    ledger = UsageLedger(dead, clock=clock, max_rows=3)
    for user in ("u1", "u2", "u3", "u4"):
        record(ledger, end_user=user)
    record(ledger, end_user="u1")  # an existing row still adds up
    assert ledger.dropped == 1 and ledger.pending_rows == 3
    assert not await ledger.flush()
    assert ledger.pending_rows == 3 and ledger.failed_flushes == 1
    await dead.dispose()
    (tmp_path / "missing" / "dir").mkdir(parents=True)
    from gateway.database.migrations import runner

    url = f"sqlite+aiosqlite:///{tmp_path}/missing/dir/none.db"
    await asyncio.to_thread(runner.upgrade, url)
    ledger.engine = create_engine(url)
    assert await ledger.flush()
    users = await usage_report(ledger.engine, start=clock.now, end=clock.now, group_by="user")
    assert {user["end_user"]: user["requests"] for user in users} == {"u1": 2, "u2": 1, "u3": 1}
    await ledger.engine.dispose()


def test_a_model_without_a_price_costs_nothing_and_a_bad_table_names_its_fault():
    from gateway.tenancy.usage.prices import cost

    assert cost(PRICES, "other", prompt_tokens=10, cached_tokens=0, completion_tokens=10) == 0.0
    with pytest.raises(ValueError, match="output"):
        parse_prices('{"m1": {"output": -1}}')
