"""The events webhooks carry, and publishing one: a row in the outbox per subscribed endpoint.

The payload is OpenAI's webhook event: ``{"id": "evt_...", "object": "event", "created_at",
"type", "data": {"id": <the batch or response>}}``; its ``id`` is also the ``webhook-id``
header, the same on every attempt, so a receiver drops the repeats of an at-least-once
delivery. ``publish`` takes the caller's open transaction, so an event is recorded exactly when
the state change it reports is (a batch's end and its event commit together).
"""

from __future__ import annotations

import time

import orjson
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from gateway.database.tables.jobs import webhook_endpoints, webhook_outbox
from gateway.jobs import ids
from gateway.jobs.store import JobsDatabase

BATCH_EVENTS = ("batch.completed", "batch.failed", "batch.cancelled", "batch.expired")
RESPONSE_EVENTS = ("response.completed", "response.failed", "response.cancelled", "response.incomplete")
EVENT_TYPES = BATCH_EVENTS + RESPONSE_EVENTS


async def publish(connection: AsyncConnection, *, owner: str, event_type: str, object_id: str) -> int:
    """Record ``event_type`` about ``object_id`` for every endpoint of ``owner`` that wants it; how many."""
    rows = (await connection.execute(sa.select(webhook_endpoints.c.id, webhook_endpoints.c.events).where(
        webhook_endpoints.c.key_id == owner))).all()
    targets = [row.id for row in rows if event_type in orjson.loads(row.events)]
    if not targets:
        return 0
    now = time.time()
    event_id = ids.event_id()
    payload = orjson.dumps({"id": event_id, "object": "event", "created_at": int(now), "type": event_type,
                            "data": {"id": object_id}}).decode()
    await connection.execute(sa.insert(webhook_outbox), [
        {"id": ids.delivery_id(), "event_id": event_id, "endpoint_id": endpoint, "event_type": event_type,
         "payload": payload, "state": "pending", "attempts": 0, "next_attempt_at": now, "created_at": now}
        for endpoint in targets])
    return len(targets)


async def publish_response_event(db: JobsDatabase, *, owner: str, status: str, response_id: str) -> int:
    """For the background Responses run when it ends: ``status`` is the response's
    (``completed``, ``failed``, ``cancelled``, ``incomplete``); other statuses send nothing."""
    event_type = f"response.{status}"
    if event_type not in RESPONSE_EVENTS or not db.ready:
        return 0
    async with db.begin() as connection:
        return await publish(connection, owner=owner, event_type=event_type, object_id=response_id)
