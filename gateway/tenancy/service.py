"""``Tenancy``: the key store, the key resolver, the limiter and the usage ledger, assembled from the settings.

Its tables live in the gateway's own database (``gateway.database``: one engine, one
migration history, given at assembly). Started once by the app's lifespan after that
database: when the database is ready (migrated), the resolver's version poller and the
ledger's writer start at once; when it is not (down at start), they start as soon as it is,
and meanwhile database keys and the admin API answer 503 (configured keys and everything else
work). ``status()`` is what ``/health`` shows.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from gateway.config import Settings
from gateway.database.engine import is_sqlite, normalize_url
from gateway.database.service import GatewayDatabase
from gateway.tenancy.errors import StoreUnavailable
from gateway.tenancy.limits.limiter import Limiter
from gateway.tenancy.limits.local import LocalLimits
from gateway.tenancy.limits.redis_limits import RedisLimits
from gateway.tenancy.limits.resp import RedisClient
from gateway.tenancy.resolver import KeyResolver
from gateway.tenancy.store import KeyStore
from gateway.tenancy.usage.ledger import UsageLedger
from gateway.tenancy.usage.prices import parse_prices

log = logging.getLogger("gateway.tenancy")


class Tenancy:
    name = "keys"  # its entry under /health's "features"

    def __init__(self, settings: Settings, database: GatewayDatabase) -> None:
        try:
            prices = parse_prices(settings.usage_prices)
        except ValueError as exc:
            raise ValueError(f"USAGE_PRICES is not a valid price table: {exc}") from None
        self.settings = settings
        self.database = database
        self.engine = database.engine  # the usage reports read through it (gateway.protocols.admin)
        self.store = KeyStore(self.engine)
        self.resolver = KeyResolver(self.store, poll_interval=settings.key_cache_poll_seconds,
                                    max_entries=settings.key_cache_size)
        redis = None
        if settings.redis_url:
            redis = RedisLimits(RedisClient(settings.redis_url, timeout=settings.redis_timeout_seconds),
                                lease_seconds=settings.limit_lease_seconds)
        self.limiter = Limiter(local=LocalLimits(lease_seconds=settings.limit_lease_seconds), redis=redis,
                               when_down=settings.limits_when_redis_down)
        self.ledger = UsageLedger(self.engine, prices=prices, flush_seconds=settings.usage_flush_seconds,
                                  max_rows=settings.usage_buffer_rows)
        self.ready = False
        self._preparing: asyncio.Task | None = None
        self.warnings = per_replica_warnings(settings)

    async def start(self) -> None:
        """After ``database.start()``: serve now if it is ready, else as soon as it is."""
        for warning in self.warnings:
            log.warning(warning)
        if self.database.ready:
            await self._serve()
        else:
            self._preparing = asyncio.create_task(self._serve_when_ready(), name="tenancy-waits-for-database")

    async def _serve(self) -> None:
        await self.resolver.start()
        self.ledger.start()
        self.ready = True

    async def _serve_when_ready(self) -> None:
        await self.database.wait_ready()
        await self._serve()
        log.warning("database keys and the admin API serve again")

    async def changed(self) -> None:
        """A key or team was changed through this replica: its own cache follows at once (the others poll)."""
        await self.resolver.changed()

    def require_ready(self) -> None:
        if not self.ready:
            raise StoreUnavailable("the gateway's database is not ready yet")

    async def stop(self) -> None:
        if self._preparing is not None:
            self._preparing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._preparing
        await self.resolver.stop()
        await self.ledger.stop()
        await self.limiter.close()

    def status(self) -> dict:
        return {"ready": self.ready, "store": "down" if (self.resolver.store_down or not self.ready) else "up",
                "limits": self.limiter.status(), "usage": self.ledger.status()}


def per_replica_warnings(settings: Settings) -> list[str]:
    """What the operator must know when limits are counted per process while the gateway is not one."""
    if settings.redis_url:
        return []
    reasons = []
    if settings.workers > 1:
        reasons.append(f"WORKERS={settings.workers}")
    if not is_sqlite(normalize_url(settings.database_url)):
        reasons.append("DATABASE_URL is PostgreSQL (shared by replicas)")
    if not reasons:
        return []
    return [f"REDIS_URL is not set while {' and '.join(reasons)}: rate limits, concurrency limits and token "
            "budgets are counted in each process, so each replica lets a key's whole limit through; set "
            "REDIS_URL to enforce them across replicas (docs/keys.md)"]
