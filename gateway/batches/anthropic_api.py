"""Anthropic's Message Batches: create, retrieve, list, results (JSONL), cancel, delete; in Anthropic's shapes.

The requests come inline (no file): each needs a ``custom_id`` (``^[a-zA-Z0-9_-]{1,64}$``,
unique in the batch) and ``params``, a Messages request without ``stream``; a malformed list is a
400 naming the request (``requests.3.custom_id``). A request whose model no engine serves, or
that the engine refuses, ends ``errored`` in the results, as with Anthropic.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime
from typing import Annotated

import orjson
from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import StreamingResponse

from gateway.batches import results
from gateway.batches.model import (
    ANTHROPIC,
    CANCELLED,
    CANCELLING,
    ENDED,
    IN_PROGRESS,
    LINE_CANCELLED,
    LINE_EXPIRED,
    MESSAGES_ENDPOINT,
    PENDING,
    RUNNING,
    BatchRecord,
)
from gateway.batches.store import BatchStore, check_room
from gateway.batches.worker import BatchWorker
from gateway.http.auth import PrincipalDep
from gateway.http.errors import GatewayError
from gateway.http.inputs import refuse_nul
from gateway.jobs import ids
from gateway.jobs.owner import owner_of
from gateway.jobs.paging import page

PREFIX = "/v1/messages/batches"
TAGS = ["Anthropic-compatible"]
CUSTOM_ID = re.compile(r"[a-zA-Z0-9_-]{1,64}")  # fullmatch: `$` would let a trailing newline through


def _rfc3339(value: float | None) -> str | None:
    if value is None:
        return None
    return datetime.fromtimestamp(value, UTC).isoformat().replace("+00:00", "Z")


def _ended_at(record: BatchRecord) -> float | None:
    return record.completed_at or record.cancelled_at or record.expired_at or record.failed_at


def batch_object(record: BatchRecord, counts: dict[str, int], base_url: str) -> dict:
    """Anthropic's ``MessageBatch``."""
    if record.status in ENDED:
        status = "ended"
    elif record.status == CANCELLING or record.ended_as == CANCELLED:
        status = "canceling"
    else:
        status = "in_progress"
    return {
        "id": record.id, "type": "message_batch", "processing_status": status,
        "request_counts": {"processing": counts.get(PENDING, 0) + counts.get(RUNNING, 0),
                           "succeeded": counts.get("succeeded", 0), "errored": counts.get("errored", 0),
                           "canceled": counts.get(LINE_CANCELLED, 0), "expired": counts.get(LINE_EXPIRED, 0)},
        "ended_at": _rfc3339(_ended_at(record)), "created_at": _rfc3339(record.created_at),
        "expires_at": _rfc3339(record.expires_at), "archived_at": None,
        "cancel_initiated_at": _rfc3339(record.cancelling_at),
        "results_url": f"{base_url}{PREFIX}/{record.id}/results" if status == "ended" else None,
    }


def public_base_url(request: Request, configured: str | None) -> str:
    """Where clients reach this gateway, for the ``results_url`` they fetch with their API key.

    ``PUBLIC_BASE_URL`` when set; else the address of the request itself, made ``https://`` when the
    proxy in front says the client used TLS (``X-Forwarded-Proto``): behind a TLS-terminating proxy
    the request reaches the gateway over plain HTTP, and a client (Anthropic's SDK does) would send
    its key to an ``http://`` ``results_url`` in clear. The header only ever upgrades the scheme, and
    only this client's own answer: no host is taken from a header.
    """
    if configured:
        return configured
    base = str(request.base_url).rstrip("/")
    forwarded = request.headers.get("x-forwarded-proto", "")
    if base.startswith("http://") and forwarded.split(",", 1)[0].strip().lower() == "https":
        base = "https://" + base.removeprefix("http://")
    return base


def _lines(raw: bytes, batch_id: str, max_lines: int) -> list[dict]:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise GatewayError(400, "the request body is not valid JSON")
    requests = body.get("requests") if isinstance(body, dict) else None
    if not isinstance(requests, list) or not requests:
        raise GatewayError(400, "requests: a non-empty list of {custom_id, params} is required", param="requests")
    if len(requests) > max_lines:
        raise GatewayError(400, f"requests: at most {max_lines} requests in a batch (BATCH_MAX_LINES)",
                           param="requests")
    seen: set[str] = set()
    lines = []
    for index, item in enumerate(requests):
        where = f"requests.{index}"
        if not isinstance(item, dict):
            raise GatewayError(400, f"{where}: must be an object with custom_id and params", param=where)
        custom_id = item.get("custom_id")
        if not isinstance(custom_id, str) or not CUSTOM_ID.fullmatch(custom_id):
            raise GatewayError(400, f"{where}.custom_id: 1 to 64 letters, digits, '_' or '-'",
                               param=f"{where}.custom_id")
        if custom_id in seen:
            raise GatewayError(400, f"{where}.custom_id: {custom_id!r} is used by an earlier request",
                               param=f"{where}.custom_id")
        seen.add(custom_id)
        params = item.get("params")
        if not isinstance(params, dict):
            raise GatewayError(400, f"{where}.params: must be a Messages request object", param=f"{where}.params")
        if params.get("stream"):
            raise GatewayError(400, f"{where}.params.stream: streaming is not supported in a batch",
                               param=f"{where}.params.stream")
        lines.append({"batch_id": batch_id, "line": index + 1, "custom_id": custom_id,
                      "body": orjson.dumps(params).decode(), "state": PENDING, "attempts": 0})
    return lines


def anthropic_batches_router(store: BatchStore, worker: BatchWorker) -> APIRouter:
    router = APIRouter(prefix=PREFIX, tags=TAGS, dependencies=[Depends(refuse_nul)])
    window = worker.settings.batch_window_seconds

    async def shown(record: BatchRecord, request: Request) -> dict:
        return batch_object(record, await store.line_counts(record.id),
                            public_base_url(request, worker.settings.public_base_url))

    @router.post("", summary="Create a Message Batch")
    async def create(request: Request, principal: PrincipalDep) -> dict:
        batch_id = ids.batch_id(ANTHROPIC)
        lines = _lines(await request.body(), batch_id, worker.settings.batch_max_lines)
        await check_room(worker.files, store, owner_of(principal), sum(len(line["body"]) for line in lines),
                         param="requests")
        now = time.time()
        record = await store.create({
            "id": batch_id, "owner": owner_of(principal), "api": ANTHROPIC, "endpoint": MESSAGES_ENDPOINT,
            "completion_window": "24h", "status": IN_PROGRESS, "total": len(lines), "created_at": now,
            "in_progress_at": now, "expires_at": now + window}, lines)
        worker.wake.set()
        return await shown(record, request)

    @router.get("", summary="List Message Batches, newest first")
    async def list_batches(request: Request, principal: PrincipalDep, after_id: str | None = None,
                           before_id: str | None = None, limit: Annotated[int | None, Query()] = None) -> dict:
        records, has_more = await store.list(owner_of(principal), ANTHROPIC,
                                             page(after=after_id, limit=limit, order=None, max_limit=1000,
                                                  after_name="after_id"), before=before_id,
                                             cursor_names=("after_id", "before_id"))
        data = [await shown(record, request) for record in records]
        return {"data": data, "has_more": has_more, "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None}

    @router.get("/{batch_id}", summary="Retrieve a Message Batch")
    async def retrieve(batch_id: str, request: Request, principal: PrincipalDep) -> dict:
        return await shown(await store.get(owner_of(principal), ANTHROPIC, batch_id), request)

    @router.get("/{batch_id}/results", summary="The results, one JSON line per request (once the batch ended)")
    async def batch_results(batch_id: str, principal: PrincipalDep) -> StreamingResponse:
        record = await store.get(owner_of(principal), ANTHROPIC, batch_id)
        if record.status not in ENDED:
            raise GatewayError(400, f"Message Batch {batch_id} has not ended yet: its results are not ready",
                               param="batch_id")
        return StreamingResponse(results.anthropic_results(store, record.id), media_type="application/x-jsonl")

    @router.post("/{batch_id}/cancel", summary="Cancel a Message Batch: requests not started are canceled")
    async def cancel(batch_id: str, request: Request, principal: PrincipalDep) -> dict:
        owner = owner_of(principal)
        record = await store.get(owner, ANTHROPIC, batch_id)
        if record.status not in ENDED and record.status != CANCELLING:
            record = await store.cancel(owner, ANTHROPIC, batch_id)
            worker.wake.set()
        return await shown(record, request)

    @router.delete("/{batch_id}", summary="Delete an ended Message Batch")
    async def delete(batch_id: str, principal: PrincipalDep) -> dict:
        await store.delete(owner_of(principal), ANTHROPIC, batch_id)
        return {"id": batch_id, "type": "message_batch_deleted"}

    return router
