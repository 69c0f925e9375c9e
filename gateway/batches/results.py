"""A batch's results as each API shows them: OpenAI's output and error files, Anthropic's results JSONL.

OpenAI: every input line appears once, in the output file when its request answered 2xx, else
in the error file: ``{"id": "batch_req_...", "custom_id", "response": {"status_code",
"request_id", "body"} | null, "error": {"code", "message"} | null}``; lines that never ran
(cancelled, expired) carry ``error.code`` ``batch_cancelled`` / ``batch_expired``.
Anthropic: ``{"custom_id", "result": {"type": "succeeded", "message"} | {"type": "errored",
"error"} | {"type": "canceled"} | {"type": "expired"}}``.
Both are written from the lines table ``store.READ_ROWS`` lines at a time.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson

from gateway.batches.model import LINE_CANCELLED, LINE_EXPIRED, SUCCEEDED, BatchRecord
from gateway.batches.store import BatchStore
from gateway.files.service import OUTPUT_PURPOSE, FileRecord, Files


def _request_id(batch_id: str, line: int) -> str:
    return f"batch_req_{batch_id.split('_', 1)[-1]}_{line}"


def openai_line(batch_id: str, row) -> tuple[bool, bytes]:
    """(goes to the output file, the line's JSON)."""
    rid = _request_id(batch_id, row.line)
    if row.outcome in (LINE_CANCELLED, LINE_EXPIRED):
        code = "batch_cancelled" if row.outcome == LINE_CANCELLED else "batch_expired"
        message = ("the batch was cancelled before this request ran" if row.outcome == LINE_CANCELLED
                   else "the batch's completion window ended before this request ran")
        return False, orjson.dumps({"id": rid, "custom_id": row.custom_id, "response": None,
                                    "error": {"code": code, "message": message}})
    body = orjson.loads(row.response) if row.response else None
    line = {"id": rid, "custom_id": row.custom_id,
            "response": {"status_code": row.status_code, "request_id": rid, "body": body},
            "error": orjson.loads(row.error) if row.error else None}
    return row.outcome == SUCCEEDED, orjson.dumps(line)


def anthropic_line(row) -> bytes:
    if row.outcome == SUCCEEDED:
        result = {"type": "succeeded", "message": orjson.loads(row.response)}
    elif row.outcome == LINE_CANCELLED:
        result = {"type": "canceled"}
    elif row.outcome == LINE_EXPIRED:
        result = {"type": "expired"}
    else:
        result = {"type": "errored", "error": _anthropic_error(row)}
    return orjson.dumps({"custom_id": row.custom_id, "result": result})


# Anthropic's error types by HTTP status (https://docs.anthropic.com/en/api/errors); others are api_error.
_ANTHROPIC_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                          404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
                          529: "overloaded_error", 503: "overloaded_error"}


def _anthropic_error(row) -> dict:
    """An errored line's error in Anthropic's envelope, keeping what the engine or gateway said.

    An answer already in Anthropic's envelope is kept whole; an OpenAI-shaped one
    (``{"error": {"message"}}``, what vLLM's OpenAI routes answer) or a bare one gives its message
    and a type from its status, so the result says why ("404: Not Found"), not just that it failed.
    """
    body = orjson.loads(row.response) if row.response else None
    if isinstance(body, dict) and body.get("type") == "error" and isinstance(body.get("error"), dict):
        return body
    message = None
    if row.error:
        message = orjson.loads(row.error).get("message")
    if message is None and isinstance(body, dict):
        inner = body.get("error")
        message = (inner.get("message") if isinstance(inner, dict) else inner) or body.get("message") \
            or body.get("detail")
    status = row.status_code
    if not isinstance(message, str) or not message:
        message = f"the request failed with status {status}" if status else "the request failed"
    return {"type": "error", "error": {"type": _ANTHROPIC_ERROR_TYPES.get(status, "api_error"), "message": message}}


async def anthropic_results(store: BatchStore, batch_id: str) -> AsyncIterator[bytes]:
    async for rows in store.lines(batch_id):
        yield b"".join(anthropic_line(row) + b"\n" for row in rows)


def _file_id(batch_id: str, kind: str) -> str:
    return f"file-{batch_id.split('_', 1)[-1]}-{kind}"


async def _lines_of(store: BatchStore, record: BatchRecord, *, output: bool) -> AsyncIterator[bytes]:
    async for rows in store.lines(record.id):
        chunk = [line + b"\n" for ok, line in (openai_line(record.id, row) for row in rows) if ok == output]
        if chunk:
            yield b"".join(chunk)


async def write_openai_files(store: BatchStore, files: Files, record: BatchRecord) -> tuple[str | None, str | None]:
    """Write the output and error files, each streamed from the lines table (one pass each).

    Their ids are fixed by the batch's: a finalization that was cut and runs again replaces them.
    """
    written: list[str | None] = []
    for kind, output, count in (("output", True, record.completed), ("errors", False, record.failed)):
        if not count:
            written.append(None)
            continue
        file: FileRecord = await files.write(record.owner, filename=f"{record.id}_{kind}.jsonl",
                                             purpose=OUTPUT_PURPOSE, file_id=_file_id(record.id, kind),
                                             chunks=_lines_of(store, record, output=output),
                                             expires_after=record.output_expires_after)
        written.append(file.id)
    return written[0], written[1]
