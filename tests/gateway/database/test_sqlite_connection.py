"""A new SQLite connection's settings: the busy timeout before the switch to WAL, and the switch tried again when
SQLite answers "database is locked" at once (connections of several processes switching a new file together)."""

from __future__ import annotations

import sqlite3

import pytest

from gateway.database import engine
from gateway.database.engine import SQLITE_BUSY_TIMEOUT_MS, configure_sqlite_connection


class ScriptedConnection:
    """A DB-API connection whose cursor records each statement and fails the WAL switch as told."""

    def __init__(self, failures: list[str]) -> None:
        self.failures = failures
        self.statements: list[str] = []

    def cursor(self) -> ScriptedConnection:
        return self

    def execute(self, statement: str) -> None:
        self.statements.append(statement)
        if statement == "PRAGMA journal_mode=WAL" and self.failures:
            raise sqlite3.OperationalError(self.failures.pop(0))

    def close(self) -> None:
        pass


@pytest.fixture(autouse=True)
def no_pause(monkeypatch):
    monkeypatch.setattr(engine, "WAL_SWITCH_RETRY_SECONDS", 0)


def test_the_busy_timeout_comes_before_the_switch_to_wal():
    connection = ScriptedConnection([])
    configure_sqlite_connection(connection)
    assert connection.statements == [f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}", "PRAGMA journal_mode=WAL",
                                     "PRAGMA synchronous=NORMAL"]


def test_a_switch_refused_as_locked_is_tried_again():
    connection = ScriptedConnection(["database is locked", "database is locked"])
    configure_sqlite_connection(connection)
    assert connection.statements.count("PRAGMA journal_mode=WAL") == 3
    assert connection.statements[-1] == "PRAGMA synchronous=NORMAL"


def test_any_other_error_of_the_switch_is_raised_at_once():
    connection = ScriptedConnection(["disk I/O error"])
    with pytest.raises(sqlite3.OperationalError, match="disk I/O error"):
        configure_sqlite_connection(connection)
    assert connection.statements.count("PRAGMA journal_mode=WAL") == 1


def test_a_switch_still_locked_at_the_busy_timeout_is_raised(monkeypatch):
    clock = iter(range(0, 10_000, 4))  # each reading 4 s later: the deadline at 10 s, the readings 4, 8, 12
    monkeypatch.setattr(engine.time, "monotonic", lambda: next(clock))
    connection = ScriptedConnection(["database is locked"] * 100)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        configure_sqlite_connection(connection)
    assert connection.statements.count("PRAGMA journal_mode=WAL") == 3  # tried at 0, 4 and 8 s; given up at 12
