"""An OpenAI batch input file read up front, line by line: every problem found with its line number.

Each line must be a JSON object ``{"custom_id", "method": "POST", "url": <the batch's
endpoint>, "body": {...}}`` with a unique ``custom_id``, a body naming a ``model`` some engine
serves, and no ``stream``. Blank lines are skipped (their numbers still count). The file is read
as a stream of chunks; problems are collected (the first ``MAX_ERRORS`` are kept, all are
counted) and a batch with any is ``failed`` with ``errors.data[]`` naming each line, as OpenAI
does: nothing runs from a file that is partly wrong.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import orjson

from gateway.failures import Failure
from gateway.http.errors import http_error
from gateway.http.inputs import NUL

MAX_ERRORS = 1000
MAX_CUSTOM_ID = 255
# How much of a line's value an error quotes: the errors are stored with the batch and sent with every
# retrieve and list, so a line's megabytes must not be copied into them.
QUOTED_CHARS = 100


class EnginesNotReady(Exception):
    """No engine reported its models yet: validation waits rather than refusing every line."""


@dataclass
class Checked:
    lines: list[tuple[int, str, bytes]] = field(default_factory=list)  # (line number, custom_id, body)
    errors: list[dict] = field(default_factory=list)
    error_count: int = 0
    stored: int = 0  # lines written to the store so far
    model: str | None = None

    def error(self, line: int | None, code: str, message: str, param: str | None = None) -> None:
        """A problem of line ``line`` (1-based), or of the whole file (``None``: OpenAI's ``line`` is
        set only where it applies, so a client never looks for a line 0)."""
        self.error_count += 1
        if len(self.errors) < MAX_ERRORS:
            self.errors.append({"code": code, "message": message, "param": param, "line": line})


async def split_lines(chunks: AsyncIterator[bytes], max_line_bytes: int) -> AsyncIterator[tuple[int, bytes | None]]:
    """(line number, bytes) of each line; bytes None for a line longer than ``max_line_bytes``."""
    pending = bytearray()
    number = 0
    too_long = False
    async for chunk in chunks:
        pending += chunk
        while (end := pending.find(b"\n")) >= 0:
            number += 1
            yield number, None if too_long or end > max_line_bytes else bytes(pending[:end])
            del pending[:end + 1]
            too_long = False
        if len(pending) > max_line_bytes:
            too_long = True
            pending.clear()
    if pending or too_long:
        yield number + 1, None if too_long else bytes(pending)


def _quoted(value: object) -> str:
    shown = repr(value)
    return shown if len(shown) <= QUOTED_CHARS else shown[:QUOTED_CHARS] + "..."


def check_line(checked: Checked, number: int, raw: bytes | None, *, endpoint: str, seen: set[str],
               resolve: Callable[[str], None]) -> None:
    """Check one line, adding it or its errors to ``checked``; ``resolve`` raises for a model none serves."""
    if raw is None:
        checked.error(number, "line_too_long", "the line is longer than the largest request body allowed")
        return
    if not raw.strip():
        return
    try:
        item = orjson.loads(raw)
    except orjson.JSONDecodeError:
        checked.error(number, "invalid_json_line", "this line is not valid JSON")
        return
    if not isinstance(item, dict):
        checked.error(number, "invalid_json_line", "this line is not a JSON object")
        return
    custom_id = item.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        checked.error(number, "missing_required_parameter", "custom_id must be a non-empty string", "custom_id")
        return
    if len(custom_id) > MAX_CUSTOM_ID:
        checked.error(number, "invalid_value", f"custom_id is longer than {MAX_CUSTOM_ID} characters", "custom_id")
        return
    if NUL in custom_id:  # (gateway.http.inputs: storing the line would fail on every try)
        checked.error(number, "invalid_value", "custom_id must not contain NUL characters", "custom_id")
        return
    if custom_id in seen:
        checked.error(number, "duplicate_custom_id", f"custom_id {custom_id!r} is used by an earlier line",
                      "custom_id")
        return
    seen.add(custom_id)
    if item.get("method") != "POST":
        checked.error(number, "invalid_method", "method must be POST", "method")
        return
    if item.get("url") != endpoint:
        checked.error(number, "mismatched_endpoint",
                      f"url {_quoted(item.get('url'))} is not the batch's endpoint {endpoint}", "url")
        return
    body = item.get("body")
    if not isinstance(body, dict):
        checked.error(number, "invalid_value", "body must be a JSON object", "body")
        return
    model = body.get("model")
    if not isinstance(model, str) or not model:
        checked.error(number, "missing_required_parameter", "body.model must be a non-empty string", "body.model")
        return
    if body.get("stream"):
        checked.error(number, "invalid_value", "streaming is not supported in a batch", "body.stream")
        return
    try:
        resolve(model)
    except Failure as failure:  # NotFound: no engine serves it; Unavailable: none has said yet
        if http_error(failure).status == 503:
            raise EnginesNotReady() from failure
        checked.error(number, "model_not_found", f"no engine serves the model {_quoted(model)}", "body.model")
        return
    checked.model = checked.model or model
    checked.lines.append((number, custom_id, orjson.dumps(body)))
