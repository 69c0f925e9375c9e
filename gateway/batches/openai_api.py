"""OpenAI's Batch API: create, retrieve, list, cancel; the batch object exactly as the ``openai`` SDK reads it."""

from __future__ import annotations

import time
from typing import Annotated

import orjson
from fastapi import APIRouter, Depends, Query, Request

from gateway.batches.model import (
    CANCELLED,
    CANCELLING,
    COMPLETED,
    COMPLETION_WINDOWS,
    ENDED,
    ENDPOINTS,
    EXPIRED,
    FAILED,
    FINALIZING,
    IN_PROGRESS,
    OPENAI,
    VALIDATING,
    BatchRecord,
)
from gateway.batches.store import BatchStore, check_room
from gateway.batches.worker import BatchWorker
from gateway.files.service import Files
from gateway.http.auth import PrincipalDep
from gateway.http.errors import GatewayError
from gateway.http.inputs import refuse_nul
from gateway.jobs import ids
from gateway.jobs.owner import owner_of
from gateway.jobs.paging import page

TAGS = ["Files and batches"]
MAX_METADATA_PAIRS = 16
OUTPUT_EXPIRY_SECONDS = (3600, 2_592_000)  # OpenAI's bounds of output_expires_after.seconds (1 hour to 30 days)


def _time(value: float | None) -> int | None:
    return int(value) if value is not None else None


def _status(record: BatchRecord) -> str:
    """The status OpenAI's clients expect: ``finalizing`` is "the batch has completed and the results
    are being prepared", so a batch writing its files on its way to another end (``ended_as``) shows
    the status it ends from: ``cancelling`` (then ``cancelled``), else ``in_progress`` (then
    ``expired``, or ``failed`` for a key revoked)."""
    if record.status != FINALIZING or record.ended_as in (None, COMPLETED):
        return record.status
    return CANCELLING if record.ended_as == CANCELLED else IN_PROGRESS


def batch_object(record: BatchRecord) -> dict:
    """OpenAI's ``Batch``."""
    return {
        "id": record.id, "object": "batch", "endpoint": record.endpoint, "model": record.model,
        "errors": {"object": "list", "data": record.errors} if record.errors else None,
        "input_file_id": record.input_file_id, "completion_window": record.completion_window,
        "status": _status(record), "output_file_id": record.output_file_id, "error_file_id": record.error_file_id,
        "created_at": int(record.created_at), "in_progress_at": _time(record.in_progress_at),
        "expires_at": _time(record.expires_at), "finalizing_at": _time(record.finalizing_at),
        "completed_at": _time(record.completed_at), "failed_at": _time(record.failed_at),
        "expired_at": _time(record.expired_at), "cancelling_at": _time(record.cancelling_at),
        "cancelled_at": _time(record.cancelled_at),
        "request_counts": {"total": record.total, "completed": record.completed, "failed": record.failed},
        "usage": {"input_tokens": record.input_tokens, "input_tokens_details": {"cached_tokens": record.cached_tokens},
                  "output_tokens": record.output_tokens,
                  "output_tokens_details": {"reasoning_tokens": record.reasoning_tokens},
                  "total_tokens": record.input_tokens + record.output_tokens},
        "metadata": record.metadata,
    }


def _metadata(value: object) -> dict | None:
    if value is None:
        return None
    if not isinstance(value, dict) or len(value) > MAX_METADATA_PAIRS:
        raise GatewayError(400, f"metadata must be an object of at most {MAX_METADATA_PAIRS} pairs", param="metadata")
    for key, item in value.items():
        if len(key) > 64 or not isinstance(item, str) or len(item) > 512:
            raise GatewayError(400, "metadata keys are at most 64 characters, values strings of at most 512",
                               param=f"metadata.{key[:64]}")
    return value


def _output_expires_after(value: object) -> float | None:
    """``output_expires_after`` (``{"anchor": "created_at", "seconds"}``): how long the output and
    error files live from their writing (OpenAI's anchor is the file's creation, not the batch's)."""
    if value is None:
        return None
    if not isinstance(value, dict) or value.get("anchor") != "created_at":
        raise GatewayError(400, "output_expires_after.anchor must be 'created_at'",
                           param="output_expires_after.anchor")
    seconds = value.get("seconds")
    low, high = OUTPUT_EXPIRY_SECONDS
    if not isinstance(seconds, int) or isinstance(seconds, bool) or not low <= seconds <= high:
        raise GatewayError(400, f"output_expires_after.seconds must be an integer between {low} and {high} (30 days)",
                           param="output_expires_after.seconds")
    return float(seconds)


def _create_body(raw: bytes) -> dict:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise GatewayError(400, "the request body is not valid JSON")
    if not isinstance(body, dict):
        raise GatewayError(400, "the request body must be a JSON object")
    for name in ("input_file_id", "endpoint", "completion_window"):
        if not isinstance(body.get(name), str) or not body[name]:
            raise GatewayError(400, f"{name} is required", param=name)
    if body["endpoint"] not in ENDPOINTS:
        raise GatewayError(400, f"endpoint must be one of {', '.join(ENDPOINTS)}", param="endpoint")
    if body["completion_window"] not in COMPLETION_WINDOWS:
        raise GatewayError(400, "completion_window must be '24h'", param="completion_window")
    return body


def openai_batches_router(store: BatchStore, files: Files, worker: BatchWorker) -> APIRouter:
    router = APIRouter(tags=TAGS, dependencies=[Depends(refuse_nul)])
    window = worker.settings.batch_window_seconds

    @router.post("/v1/batches", summary="Create a batch from an uploaded JSONL file")
    async def create_batch(request: Request, principal: PrincipalDep) -> dict:
        body = _create_body(await request.body())
        output_expires_after = _output_expires_after(body.get("output_expires_after"))
        owner = owner_of(principal)
        try:
            file = await files.get(owner, body["input_file_id"])
        except GatewayError:
            raise GatewayError(400, f"input_file_id: no such file {body['input_file_id']!r}",
                               param="input_file_id", code="file_not_found")
        if file.purpose != "batch":
            raise GatewayError(400, "input_file_id must name a file uploaded with purpose 'batch'",
                               param="input_file_id")
        await check_room(files, store, owner, file.bytes, param="input_file_id")  # its lines copy the file
        now = time.time()
        record = await store.create({
            "id": ids.batch_id(OPENAI), "owner": owner, "api": OPENAI, "endpoint": body["endpoint"],
            "input_file_id": file.id, "completion_window": body["completion_window"], "status": VALIDATING,
            "metadata": _metadata(body.get("metadata")), "created_at": now, "expires_at": now + window,
            "output_expires_after": output_expires_after})
        worker.wake.set()
        return batch_object(record)

    @router.get("/v1/batches", summary="List your batches, newest first")
    async def list_batches(principal: PrincipalDep, after: str | None = None,
                           limit: Annotated[int | None, Query()] = None) -> dict:
        records, has_more = await store.list(owner_of(principal), OPENAI, page(after=after, limit=limit, order=None))
        data = [batch_object(record) for record in records]
        return {"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None, "has_more": has_more}

    @router.get("/v1/batches/{batch_id}", summary="Retrieve a batch")
    async def retrieve_batch(batch_id: str, principal: PrincipalDep) -> dict:
        return batch_object(await store.get(owner_of(principal), OPENAI, batch_id))

    @router.post("/v1/batches/{batch_id}/cancel", summary="Cancel a batch: lines not started stop, running ones finish")
    async def cancel_batch(batch_id: str, principal: PrincipalDep) -> dict:
        owner = owner_of(principal)
        record = await store.get(owner, OPENAI, batch_id)
        if record.status in ENDED and record.status != CANCELLED:
            raise GatewayError(409, f"Cannot cancel a batch with status '{record.status}'", param="batch_id")
        if record.status not in (CANCELLING, CANCELLED):
            record = await store.cancel(owner, OPENAI, batch_id)
            worker.wake.set()
        if record.status in (IN_PROGRESS, FINALIZING) and record.ended_as in (EXPIRED, FAILED):
            # (its window ran out or its key was refused before this cancel: it ends as that, store.cancel)
            raise GatewayError(409, f"Cannot cancel a batch that is ending as '{record.ended_as}'", param="batch_id")
        return batch_object(record)

    return router
