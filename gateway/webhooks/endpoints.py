"""Webhook endpoints: which URL gets which events of which key (a team's, once teams exist), with its secret."""

from __future__ import annotations

import time

import orjson
import sqlalchemy as sa

from gateway.database.tables.jobs import webhook_endpoints, webhook_outbox
from gateway.http.errors import GatewayError
from gateway.jobs import ids
from gateway.jobs.store import JobsDatabase
from gateway.tenancy.errors import NotFound, StoreUnavailable, ValueRefused
from gateway.tenancy.store import KeyStore
from gateway.webhooks import signing
from gateway.webhooks.destinations import DestinationRefused, Network, check_destination
from gateway.webhooks.events import EVENT_TYPES

MAX_DELIVERIES_SHOWN = 100


def _shown(row, *, secret: str | None = None) -> dict:
    shown = {"id": row.id, "object": "webhook_endpoint", "url": row.url, "key_id": row.key_id,
             "team_id": row.team_id, "events": orjson.loads(row.events), "description": row.description,
             "created_at": int(row.created_at)}
    if secret is not None:
        shown["secret"] = secret  # shown once, when created
    return shown


class Endpoints:
    def __init__(self, db: JobsDatabase, *, allowed: list[Network], configured_keys: frozenset[str] = frozenset(),
                 key_store: KeyStore | None = None) -> None:
        self.db = db
        self.allowed = allowed
        self.configured_keys = configured_keys  # API_KEYS', ADMIN_API_KEYS', APP_API_KEYS' ids (KeyRing.owner_ids)
        self.key_store = key_store  # the database keys (None: there are none)

    async def _check_key(self, key_id: str) -> None:
        """A 400 naming ``key_id`` unless it is a configured key or a database key not revoked: an endpoint
        for any other id would never get an event (an id mistyped, or of another gateway)."""
        if key_id in self.configured_keys:
            return
        record = None
        if self.key_store is not None:
            try:
                record = await self.key_store.get_key(key_id)
            except (NotFound, ValueRefused):
                record = None
            except StoreUnavailable:
                raise GatewayError(503, "the key store is unavailable: key_id cannot be checked now, retry shortly",
                                   code="key_store_unavailable", headers={"retry-after": "1"})
        if record is None:
            raise GatewayError(400, f"key_id: no key with id {key_id!r}", param="key_id", code="key_not_found")
        if record.revoked_at is not None:
            raise GatewayError(400, f"key_id: the key {key_id!r} is revoked", param="key_id", code="key_revoked")

    async def create(self, *, url: str, events: list[str] | None, key_id: str | None, team_id: str | None,
                     description: str | None) -> dict:
        if team_id is not None:
            raise GatewayError(400, "team webhooks need teams (issue 24); register the endpoint for a key_id",
                               param="team_id")
        if not key_id:
            raise GatewayError(400, "key_id is required: the key whose events this endpoint receives",
                               param="key_id")
        events = list(EVENT_TYPES) if events is None else events
        unknown = [event for event in events if event not in EVENT_TYPES]
        if unknown or not events:
            raise GatewayError(400, f"events must be some of {', '.join(EVENT_TYPES)}", param="events")
        try:
            await check_destination(url, self.allowed)
        except DestinationRefused as refused:
            raise GatewayError(400, f"url: {refused}", param="url", code="webhook_destination_refused")
        await self._check_key(key_id)
        secret = signing.new_secret()
        row = {"id": ids.endpoint_id(), "key_id": key_id, "team_id": None, "url": url, "secret": secret,
               "events": orjson.dumps(sorted(set(events))).decode(), "description": description,
               "created_at": time.time()}
        async with self.db.begin() as connection:
            await connection.execute(sa.insert(webhook_endpoints).values(**row))
        return _shown(_Row(row), secret=secret)

    async def list(self, *, limit: int, after: str | None = None, key_id: str | None = None) -> tuple[list[dict], bool]:
        """A page of endpoints by id, as the admin API's lists page (``gateway.http.listing``), and whether
        more follow."""
        query = sa.select(webhook_endpoints).order_by(webhook_endpoints.c.id).limit(limit + 1)
        if after is not None:
            query = query.where(webhook_endpoints.c.id > after)
        if key_id is not None:
            query = query.where(webhook_endpoints.c.key_id == key_id)
        async with self.db.begin() as connection:
            rows = (await connection.execute(query)).all()
        return [_shown(row) for row in rows[:limit]], len(rows) > limit

    async def get(self, endpoint_id: str) -> dict:
        async with self.db.begin() as connection:
            row = (await connection.execute(sa.select(webhook_endpoints).where(
                webhook_endpoints.c.id == endpoint_id))).first()
        if row is None:
            raise GatewayError(404, f"No such webhook endpoint: {endpoint_id}", param="webhook_id")
        return _shown(row)

    async def delete(self, endpoint_id: str) -> dict:
        await self.get(endpoint_id)
        async with self.db.begin() as connection:
            await connection.execute(sa.delete(webhook_endpoints).where(webhook_endpoints.c.id == endpoint_id))
            # Its deliveries too: nothing can read them now (its deliveries route answers 404), and a
            # pending one could only fail with "endpoint deleted". (A delivery posting right now
            # finishes; its row's update then touches nothing.)
            await connection.execute(sa.delete(webhook_outbox).where(webhook_outbox.c.endpoint_id == endpoint_id))
        return {"id": endpoint_id, "object": "webhook_endpoint", "deleted": True}

    async def deliveries(self, endpoint_id: str) -> list[dict]:
        await self.get(endpoint_id)
        async with self.db.begin() as connection:
            rows = (await connection.execute(sa.select(webhook_outbox).where(
                webhook_outbox.c.endpoint_id == endpoint_id).order_by(webhook_outbox.c.created_at.desc())
                .limit(MAX_DELIVERIES_SHOWN))).all()
        return [{"id": row.id, "event_id": row.event_id, "type": row.event_type, "state": row.state,
                 "attempts": row.attempts, "last_status": row.last_status, "last_error": row.last_error,
                 "created_at": int(row.created_at),
                 "delivered_at": int(row.delivered_at) if row.delivered_at is not None else None}
                for row in rows]


class _Row:
    """A dict read like a result row (what ``_shown`` takes)."""

    def __init__(self, values: dict) -> None:
        self.__dict__.update(values)
