"""Structured JSON logs with the request id on every line.

The request id lives in a context variable set by the ASGI middleware, so any
log call made while serving a request (in the route, the relay, a service)
carries it without being passed around.
"""

from __future__ import annotations

import contextvars
import logging
import sys
import time

import orjson

request_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)

_RESERVED = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime", "color_message"}
# A record with exactly one extra (``fields``) has this many attributes.
_PLAIN_RECORD_SIZE = len(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) + 1


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, request_id, extras."""

    # The timestamp's whole seconds, formatted once per second rather than once per line
    # (strftime and gmtime on every access line).
    _second: tuple[int, str] = (-1, "")

    def format(self, record: logging.LogRecord) -> str:
        second, prefix = self._second
        if int(record.created) != second:
            second = int(record.created)
            prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            self._second = (second, prefix)
        entry: dict[str, object] = {
            "ts": f"{prefix}.{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        request_id = request_id_var.get()
        if request_id is not None:
            entry["request_id"] = request_id
        fields = record.__dict__.get("fields")
        if fields is not None and len(record.__dict__) == _PLAIN_RECORD_SIZE:
            entry.update(fields)  # the access line: its fields in one dict, no scan for extras
        else:
            for key, value in record.__dict__.items():
                if key not in _RESERVED and not key.startswith("_"):
                    entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


def configure_logging(level: str = "info") -> None:
    """Route the root logger (and uvicorn's) through the JSON formatter on stderr."""
    # The JSON lines carry no source location, thread or process: skip the
    # stack walk and lookups that logging does for every record otherwise.
    logging._srcfile = None  # type: ignore[attr-defined]
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error"):
        logger = logging.getLogger(name)
        logger.handlers[:] = []
        logger.propagate = True
    # The gateway writes its own access line (with request id and timings).
    logging.getLogger("uvicorn.access").disabled = True
    # aiohttp/asyncio chatter about closed connections is not actionable.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
