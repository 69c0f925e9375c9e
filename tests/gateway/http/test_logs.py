"""The JSON log line: its timestamp (formatted once per second, so check it across seconds)."""

from __future__ import annotations

import io
import logging
import time

import aiosqlite
import orjson
import pytest

from gateway.http import logs
from gateway.http.context import RequestContext, current
from gateway.http.logs import JsonFormatter


def _line(formatter: JsonFormatter, created: float, **extra) -> dict:
    record = logging.LogRecord("gateway.access", logging.INFO, "", 0, "request", (), None)
    record.created = created
    record.msecs = (created - int(created)) * 1000
    record.__dict__.update(extra)
    return orjson.loads(formatter.format(record))


def _expected(created: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created)) + f".{int((created - int(created)) * 1000):03d}Z"


def test_each_line_carries_its_own_time_across_seconds_minutes_and_back():
    formatter = JsonFormatter()
    moments = [1796196021.004, 1796196021.999, 1796196022.5, 1796196059.75, 1796196060.0, 1796196000.25,
               1796196060.125]
    for created in moments:
        assert _line(formatter, created)["ts"] == _expected(created)


def test_the_access_line_has_its_fields_and_request_id():
    token = current.set(RequestContext("rid-1"))
    try:
        line = _line(JsonFormatter(), 1796196021.5, fields={"status": 200, "path": "/v1/chat/completions"})
    finally:
        current.reset(token)
    assert line == {"ts": _expected(1796196021.5), "level": "info", "logger": "gateway.access", "msg": "request",
                    "request_id": "rid-1", "status": 200, "path": "/v1/chat/completions"}


# --- the access line (AccessLog): written by the JSON handler's own path, or through logging ---

@pytest.fixture
def json_logging():
    """configure_logging's setup, writing to a buffer; the logging configuration restored afterwards."""
    root = logging.getLogger()
    saved = (root.handlers[:], root.level, logs._json_handler, logging._srcfile, logging.logThreads,
             logging.logProcesses, logging.logMultiprocessing)
    saved_loggers = {name: (logging.getLogger(name).handlers[:], logging.getLogger(name).propagate,
                            logging.getLogger(name).disabled, logging.getLogger(name).level)
                     for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "aiohttp.access", *logs.DATA_LOGGERS)}
    logs.configure_logging("info")
    buffer = io.StringIO()
    logs._json_handler.setStream(buffer)
    try:
        yield buffer
    finally:
        (root.handlers[:], level, logs._json_handler, logging._srcfile, logging.logThreads,
         logging.logProcesses, logging.logMultiprocessing) = saved
        root.setLevel(level)
        for name, (handlers, propagate, disabled, level) in saved_loggers.items():
            logger = logging.getLogger(name)
            logger.handlers[:], logger.propagate, logger.disabled = handlers, propagate, disabled
            logger.setLevel(level)


FIELDS = {"method": "POST", "path": "/v1/chat/completions", "status": 200, "ms": 1.5, "upstream_ms": 1.0,
          "key_id": "k-1"}


def _lines(buffer: io.StringIO) -> list[dict]:
    return [orjson.loads(line) for line in buffer.getvalue().splitlines()]


def test_the_access_line_written_directly_is_the_line_logging_writes(json_logging):
    logger = logging.getLogger("gateway.access.test-direct")
    root = logging.getLogger()
    pytest_handlers = root.handlers[:]  # pytest's own capture handlers, added for the test's call
    root.handlers[:] = [logs._json_handler]
    token = current.set(RequestContext("rid-2"))
    try:
        assert logs._sole_json_handler(logger) is logs._json_handler  # the direct path is the one taken
        logs.AccessLog(logger).write(FIELDS)              # direct: the JSON handler is the only one
        logger.info("request", extra={"fields": FIELDS})  # the same line through logging
    finally:
        current.reset(token)
        root.handlers[:] = pytest_handlers
    direct, logged = _lines(json_logging)
    assert list(direct) == list(logged)  # same keys in the same order
    assert {k: v for k, v in direct.items() if k != "ts"} == {k: v for k, v in logged.items() if k != "ts"} == {
        "level": "info", "logger": "gateway.access.test-direct", "msg": "request", "request_id": "rid-2", **FIELDS}
    assert abs(time.mktime(time.strptime(direct["ts"][:19], "%Y-%m-%dT%H:%M:%S")) - time.mktime(time.gmtime())) < 5


def test_another_handler_on_the_way_gets_the_record_through_logging(json_logging):
    logger = logging.getLogger("gateway.access.test-caught")
    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    keep = Keep()
    logging.getLogger().addHandler(keep)
    assert logs._sole_json_handler(logger) is None
    try:
        logs.AccessLog(logger).write(FIELDS)
    finally:
        logging.getLogger().removeHandler(keep)
    assert [(record.name, record.getMessage(), record.fields) for record in seen] == [
        ("gateway.access.test-caught", "request", FIELDS)]
    assert _lines(json_logging)[0]["status"] == 200  # and the JSON handler still wrote its line


def test_a_filter_or_a_level_above_info_is_respected(json_logging):
    logger = logging.getLogger("gateway.access.test-quiet")
    logger.setLevel(logging.WARNING)
    logs.AccessLog(logger).write(FIELDS)
    logger.setLevel(logging.NOTSET)
    logger.addFilter(lambda record: False)
    logs.AccessLog(logger).write(FIELDS)
    assert json_logging.getvalue() == ""


# --- LOG_LEVEL=debug: the gateway's own debug lines, never the data libraries log at DEBUG ---

async def test_debug_logs_hold_no_bound_value_of_a_sqlite_statement(json_logging, tmp_path):
    """aiosqlite's DEBUG lines carry every statement's parameters (prompts, digests, signing secrets)."""
    logs.configure_logging("debug")
    logs._json_handler.setStream(json_logging)
    async with aiosqlite.connect(tmp_path / "t.db") as db:
        await db.execute("CREATE TABLE secrets (value TEXT)")
        await db.execute("INSERT INTO secrets VALUES (?)", ("whsec-a-webhook-signing-secret",))
        await db.commit()
    logging.getLogger("gateway.test-debug").debug("the gateway's own debug line")
    text = json_logging.getvalue()
    assert "whsec-a-webhook-signing-secret" not in text
    assert "the gateway's own debug line" in text  # debug is on, for the gateway's own lines


def test_a_quieter_level_keeps_data_loggers_as_quiet(json_logging):
    logs.configure_logging("warning")
    assert not logging.getLogger("aiosqlite").isEnabledFor(logging.INFO)
