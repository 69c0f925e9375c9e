"""The JSON log line: its timestamp (formatted once per second, so check it across seconds)."""

from __future__ import annotations

import logging
import time

import orjson

from gateway.http.logs import JsonFormatter, request_id_var


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
    token = request_id_var.set("rid-1")
    try:
        line = _line(JsonFormatter(), 1796196021.5, fields={"status": 200, "path": "/v1/chat/completions"})
    finally:
        request_id_var.reset(token)
    assert line == {"ts": _expected(1796196021.5), "level": "info", "logger": "gateway.access", "msg": "request",
                    "request_id": "rid-1", "status": 200, "path": "/v1/chat/completions"}
