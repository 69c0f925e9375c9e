"""Files, batches and webhooks assembled from the core: their database, worker, deliverer and routes.

``create_app`` builds one ``OfflineJobs`` when ``BATCHES_ENABLED`` (the default), includes its
routers, and starts and stops it with the gateway. Its tables live in the gateway's own
database (``gateway.database``), which the app starts before it: nothing here holds up the
start, the worker and the deliverer begin once the database is migrated, and the routes answer
503 until then.
"""

from __future__ import annotations

from fastapi import APIRouter

from gateway.batches.anthropic_api import PREFIX as MESSAGES_BATCHES_PREFIX
from gateway.batches.anthropic_api import anthropic_batches_router
from gateway.batches.callers import LineCallers
from gateway.batches.executor import LineExecutor, RequestPathExecutor
from gateway.batches.lane import BatchLane
from gateway.batches.openai_api import openai_batches_router
from gateway.batches.store import BatchStore
from gateway.batches.worker import BatchWorker
from gateway.core import Core
from gateway.database.service import GatewayDatabase
from gateway.files.blobs import DatabaseBlobs, DirectoryBlobs
from gateway.files.routes import FILES_PATH, files_router
from gateway.files.service import Files
from gateway.files.upload import MULTIPART_FRAMING_BYTES
from gateway.http.auth import KeyRing
from gateway.http.errors import OPENAI_SHAPE, ErrorShapes
from gateway.jobs.store import JobsDatabase
from gateway.protocols.anthropic.errors import ANTHROPIC_SHAPE
from gateway.tenancy.store import KeyStore
from gateway.webhooks.delivery import Deliverer
from gateway.webhooks.destinations import parse_networks
from gateway.webhooks.endpoints import Endpoints
from gateway.webhooks.events import publish_response_event
from gateway.webhooks.routes import PREFIX as WEBHOOKS_PREFIX
from gateway.webhooks.routes import webhooks_router


class OfflineJobs:
    def __init__(self, core: Core, database: GatewayDatabase, *, executor: LineExecutor | None = None,
                 key_store: KeyStore | None = None, replica: str | None = None) -> None:
        settings = core.settings
        self.lane = BatchLane.for_core(core)
        executor = executor or RequestPathExecutor(core, self.lane, callers=LineCallers(key_store))
        self.db = JobsDatabase(database)
        blobs = DatabaseBlobs(self.db) if settings.files_storage == "database" \
            else DirectoryBlobs(settings.files_directory)
        self.files = Files(self.db, blobs, max_bytes=settings.files_max_bytes,
                           quota_bytes=settings.files_quota_bytes_per_key,
                           retention_seconds=settings.files_retention_seconds, max_files=settings.files_max_per_key)
        self.store = BatchStore(self.db)
        self.worker = BatchWorker(self.store, self.files, executor, core.engine_state,
                                  settings, replica=replica)
        allowed = parse_networks(settings.webhook_allowed_networks)
        self.endpoints = Endpoints(self.db, allowed=allowed, configured_keys=KeyRing.from_settings(settings).owner_ids,
                                   key_store=key_store)
        self.deliverer = Deliverer(self.db, allowed=allowed, timeout=settings.webhook_timeout_seconds,
                                   max_attempts=settings.webhook_max_attempts,
                                   backoff=settings.webhook_backoff_seconds, concurrency=settings.webhook_concurrency,
                                   poll_seconds=settings.batch_poll_seconds,
                                   retention_seconds=settings.jobs_retention_seconds, replica=self.worker.replica)

    def routers(self, shapes: ErrorShapes) -> list[APIRouter]:
        shapes.register_prefix(MESSAGES_BATCHES_PREFIX, ANTHROPIC_SHAPE)
        shapes.register_prefix(WEBHOOKS_PREFIX, OPENAI_SHAPE)
        return [files_router(self.files), openai_batches_router(self.store, self.files, self.worker),
                anthropic_batches_router(self.store, self.worker), webhooks_router(self.endpoints)]

    def body_limits(self) -> dict[str, tuple[int, str]]:
        """The uploads' own request-body limit (instead of ``MAX_BODY_BYTES``): the file, plus the multipart framing."""
        return {FILES_PATH: (self.files.max_bytes + MULTIPART_FRAMING_BYTES, "FILES_MAX_BYTES")}

    async def start(self) -> None:
        self.worker.start()
        self.deliverer.start()

    async def stop(self) -> None:
        await self.worker.stop()
        self.lane.close()
        await self.deliverer.stop()

    async def response_ended(self, *, owner: str, status: str, response_id: str) -> None:
        """For the background Responses run when it ends (``gateway/protocols/responses``, step 2):
        a ``response.<status>`` event for the owner's endpoints, delivered like the batches'."""
        if await publish_response_event(self.db, owner=owner, status=status, response_id=response_id):
            self.deliverer.wake.set()
