"""Structured JSON logs with the request id on every line.

The request's context (``http.context``) sits in the one context variable the middleware
sets, because logging can be reached no other way: any log call made while serving a
request (in the route, the relay, a service) carries its id without being passed around.

The access line (one per request) is written by :class:`AccessLog`: when the JSON handler
``configure_logging`` installed is the only place the record would go (the served gateway),
it writes that handler's line itself, the same JSON, skipping the LogRecord and the
logging module's calls around it (valgrind: ~70,000 instructions of a ~900,000
non-streamed request were the access line); with any other handler or filter on the way
(tests' caplog, an embedding application's logging) it logs through ``logging`` as before.
"""

from __future__ import annotations

import logging
import sys
import time

import orjson

from gateway.http.context import current
from gateway.tracing.hooks import trace_id

_RESERVED = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime", "color_message"}
# A record with exactly one extra (``fields``) has this many attributes.
_PLAIN_RECORD_SIZE = len(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) + 1


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, request_id, extras."""

    # The timestamp's whole seconds, formatted once per second rather than once per line
    # (strftime and gmtime on every access line).
    _second: tuple[int, str] = (-1, "")

    def timestamp(self, created: float, msecs: float) -> str:
        second, prefix = self._second
        if int(created) != second:
            second = int(created)
            prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            self._second = (second, prefix)
        return f"{prefix}.{int(msecs):03d}Z"

    def head(self, created: float, msecs: float, level: str, logger: str, message: str) -> dict[str, object]:
        """A line's first fields (the request id's included)."""
        entry: dict[str, object] = {"ts": self.timestamp(created, msecs), "level": level, "logger": logger,
                                    "msg": message}
        request = current.get()
        if request is not None:
            entry["request_id"] = request.request_id
            traced = trace_id(request)
            if traced is not None:
                entry["trace_id"] = traced
        return entry

    def format(self, record: logging.LogRecord) -> str:
        entry = self.head(record.created, record.msecs, record.levelname.lower(), record.name, record.getMessage())
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


class AccessLog:
    """Writes ``logger``'s one INFO line per request, ``fields`` as its extras."""

    def __init__(self, logger: logging.Logger, message: str = "request") -> None:
        self.logger = logger
        self.message = message

    def write(self, fields: dict[str, object]) -> None:
        handler = _sole_json_handler(self.logger)
        if handler is None:
            self.logger.info(self.message, extra={"fields": fields})
            return
        created = time.time()
        formatter: JsonFormatter = handler.formatter  # type: ignore[assignment]
        entry = formatter.head(created, (created - int(created)) * 1000, "info", self.logger.name, self.message)
        entry.update(fields)
        try:
            line = orjson.dumps(entry, default=str).decode() + handler.terminator
            with handler.lock:  # as StreamHandler.emit and flush do, in case a thread logs too
                handler.stream.write(line)
                handler.stream.flush()
        except Exception:  # what StreamHandler.emit does with a failed write: report it, go on
            handler.handleError(logging.LogRecord(self.logger.name, logging.INFO, "", 0, self.message, (), None))


_json_handler: logging.StreamHandler | None = None  # the handler configure_logging installed

# Libraries that write the data they handle into their DEBUG lines: aiosqlite logs every
# statement with its bound values (prompts, uploaded files' bytes, key digests, webhook signing
# secrets, the marketplace's signing key). ``LOG_LEVEL=debug`` turns on the gateway's own debug
# lines; these loggers stay at INFO whatever the level, so no level writes secrets or personal data.
DATA_LOGGERS = ("aiosqlite",)


def _sole_json_handler(logger: logging.Logger) -> logging.StreamHandler | None:
    """The JSON handler, if an INFO record of ``logger`` would reach it and nothing else (else None).

    Mirrors ``Logger.handle``/``callHandlers``: the logger itself enabled and without filters,
    then every handler up the hierarchy until one does not propagate.
    """
    json_handler = _json_handler
    if json_handler is None or logger.filters or not logger.isEnabledFor(logging.INFO):
        return None
    reached = 0
    current: logging.Logger | None = logger
    while current is not None:
        for handler in current.handlers:
            if handler.level > logging.INFO:
                continue
            if handler is not json_handler or handler.filters:
                return None
            reached += 1
        if not current.propagate:
            break
        current = current.parent
    return json_handler if reached == 1 else None


def configure_logging(level: str = "info") -> None:
    """Route the root logger (and uvicorn's) through the JSON formatter on stderr."""
    # The JSON lines carry no source location, thread or process: skip the
    # stack walk and lookups that logging does for every record otherwise.
    logging._srcfile = None  # type: ignore[attr-defined]
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    global _json_handler
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    _json_handler = handler
    root.setLevel(level.upper())
    for name in DATA_LOGGERS:
        logging.getLogger(name).setLevel(max(logging.INFO, root.level))
    for name in ("uvicorn", "uvicorn.error"):
        logger = logging.getLogger(name)
        logger.handlers[:] = []
        logger.propagate = True
    # The gateway writes its own access line (with request id and timings).
    logging.getLogger("uvicorn.access").disabled = True
    # aiohttp/asyncio chatter about closed connections is not actionable.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
