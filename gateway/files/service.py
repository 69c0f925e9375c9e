"""Files: their records, bytes, owner, quota and retention; the one home of the file rules.

A file is visible only to its owner (``jobs.owner``): another key asking for it gets a 404,
as if it did not exist. An upload first writes a hidden record (``bytes`` = -1, expiring
within the hour), then its bytes, then the record's size: a gateway that dies mid-upload leaves
nothing a client sees, and the sweeper removes what it left. The per-key quota counts every
file the key owns, the batches' outputs included; it is checked before an upload starts, as
its bytes arrive, and again when it is recorded.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import sqlalchemy as sa

from gateway.database.tables.jobs import files
from gateway.files.blobs import Blobs
from gateway.http.errors import GatewayError
from gateway.jobs import ids
from gateway.jobs.paging import Page
from gateway.jobs.store import JobsDatabase

UPLOAD_DEADLINE_SECONDS = 3600.0
INCOMPLETE = -1
# What the OpenAI SDK may send as ``purpose``; the gateway stores files for batches only.
KNOWN_PURPOSES = ("assistants", "batch", "fine-tune", "vision", "user_data", "evals")
UPLOAD_PURPOSES = ("batch",)
OUTPUT_PURPOSE = "batch_output"


@dataclass(frozen=True)
class FileRecord:
    id: str
    owner: str
    purpose: str
    filename: str
    bytes: int
    created_at: float
    expires_at: float | None

    def openai(self) -> dict:
        """OpenAI's ``FileObject``."""
        return {"id": self.id, "object": "file", "bytes": self.bytes, "created_at": int(self.created_at),
                "filename": self.filename, "purpose": self.purpose, "status": "processed",
                "expires_at": int(self.expires_at) if self.expires_at is not None else None,
                "status_details": None}


def _record(row) -> FileRecord:
    return FileRecord(id=row.id, owner=row.owner, purpose=row.purpose, filename=row.filename, bytes=row.bytes,
                      created_at=row.created_at, expires_at=row.expires_at)


class QuotaExceeded(GatewayError):
    def __init__(self, quota: int) -> None:
        super().__init__(400, f"this key's file storage is full ({quota} bytes, FILES_QUOTA_BYTES_PER_KEY): "
                         "delete files to upload more", param="file", code="storage_quota_exceeded")


class TooManyFiles(GatewayError):
    def __init__(self, limit: int) -> None:
        super().__init__(400, f"this key keeps {limit} files, its limit (FILES_MAX_PER_KEY): delete files to "
                              "upload more", param="file", code="storage_quota_exceeded")


class FileTooLarge(GatewayError):
    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the file exceeds the limit of {limit} bytes (FILES_MAX_BYTES)", param="file",
                         code="file_too_large")


class Files:
    def __init__(self, db: JobsDatabase, blobs: Blobs, *, max_bytes: int, quota_bytes: int,
                 retention_seconds: float, max_files: int = 10_000) -> None:
        self.db = db
        self.blobs = blobs
        self.max_bytes = max_bytes
        self.quota_bytes = quota_bytes
        # Files a key keeps (its uploads in progress and its batches' outputs included): bytes
        # alone do not bound them, an empty file takes none of the quota but a row all the same.
        self.max_files = max_files
        self.retention_seconds = retention_seconds

    # --- writing ---------------------------------------------------------------------------
    async def used_bytes(self, owner: str) -> int:
        async with self.db.begin() as connection:
            used = (await connection.execute(sa.select(sa.func.coalesce(sa.func.sum(files.c.bytes), 0)).where(
                files.c.owner == owner, files.c.bytes >= 0))).scalar()
        return int(used or 0)

    async def begin_upload(self, owner: str) -> "Upload":
        used = await self.used_bytes(owner)
        if used >= self.quota_bytes:
            raise QuotaExceeded(self.quota_bytes)
        async with self.db.begin() as connection:
            kept = (await connection.execute(sa.select(sa.func.count()).select_from(files).where(
                files.c.owner == owner))).scalar()
        if kept >= self.max_files:
            raise TooManyFiles(self.max_files)
        file_id = ids.file_id()
        now = time.time()
        async with self.db.begin() as connection:
            await connection.execute(sa.insert(files).values(
                id=file_id, owner=owner, purpose="", filename="", bytes=INCOMPLETE, created_at=now,
                expires_at=now + UPLOAD_DEADLINE_SECONDS, storage=self.blobs.name))
        limit = min(self.max_bytes, self.quota_bytes - used)
        return Upload(self, file_id, owner, limit=limit, too_large=FileTooLarge(self.max_bytes)
                      if limit == self.max_bytes else QuotaExceeded(self.quota_bytes))

    async def _record_upload(self, upload: "Upload", *, purpose: str, filename: str,
                             expires_after: float | None) -> FileRecord:
        now = time.time()
        lifetime = self.retention_seconds if expires_after is None else min(expires_after, self.retention_seconds)
        async with self.db.begin() as connection:
            used = (await connection.execute(sa.select(sa.func.coalesce(sa.func.sum(files.c.bytes), 0)).where(
                files.c.owner == upload.owner, files.c.bytes >= 0))).scalar()
            if int(used or 0) + upload.size > self.quota_bytes:
                raise QuotaExceeded(self.quota_bytes)
            await connection.execute(sa.update(files).where(files.c.id == upload.file_id).values(
                purpose=purpose, filename=filename[:255], bytes=upload.size, created_at=now,
                expires_at=now + lifetime))
        return FileRecord(id=upload.file_id, owner=upload.owner, purpose=purpose, filename=filename[:255],
                          bytes=upload.size, created_at=now, expires_at=now + lifetime)

    async def write(self, owner: str, *, filename: str, purpose: str, chunks: AsyncIterator[bytes] | list[bytes],
                    file_id: str | None = None, expires_after: float | None = None) -> FileRecord:
        """A file the gateway produces (a batch's output): no size limit or quota check, its owner's retention.

        ``file_id``: a fixed id, so writing it again (a finalization that was cut) replaces it.
        ``expires_after``: seconds it lives from now (the batch's ``output_expires_after``; shorter only).
        """
        file_id = file_id or ids.file_id()
        await self.delete_any(file_id)
        writer = self.blobs.writer(file_id)
        size = 0
        try:
            if isinstance(chunks, list):
                for chunk in chunks:
                    size += len(chunk)
                    await writer.write(chunk)
            else:
                async for chunk in chunks:
                    size += len(chunk)
                    await writer.write(chunk)
            await writer.finish()
        except BaseException:
            await writer.abort()
            raise
        now = time.time()
        lifetime = self.retention_seconds if expires_after is None else min(expires_after, self.retention_seconds)
        async with self.db.begin() as connection:
            await connection.execute(sa.insert(files).values(
                id=file_id, owner=owner, purpose=purpose, filename=filename, bytes=size, created_at=now,
                expires_at=now + lifetime, storage=self.blobs.name))
        return FileRecord(id=file_id, owner=owner, purpose=purpose, filename=filename, bytes=size, created_at=now,
                          expires_at=now + lifetime)

    # --- reading -----------------------------------------------------------------------------
    async def get(self, owner: str, file_id: str) -> FileRecord:
        """The owner's complete, unexpired file; 404 otherwise (another key's file included)."""
        if ids.is_valid(file_id):
            async with self.db.begin() as connection:
                row = (await connection.execute(sa.select(files).where(
                    files.c.id == file_id, files.c.owner == owner, files.c.bytes >= 0))).first()
            if row is not None and (row.expires_at is None or row.expires_at > time.time()):
                return _record(row)
        raise GatewayError(404, f"No such File object: {file_id}", param="file_id", code="file_not_found")

    async def list(self, owner: str, page: Page, *, purpose: str | None = None) -> tuple[list[FileRecord], bool]:
        query = sa.select(files).where(files.c.owner == owner, files.c.bytes >= 0,
                                       sa.or_(files.c.expires_at.is_(None), files.c.expires_at > time.time()))
        if purpose is not None:
            query = query.where(files.c.purpose == purpose)
        async with self.db.begin() as connection:
            if page.after is not None:
                anchor = (await connection.execute(sa.select(files.c.created_at).where(
                    files.c.id == page.after, files.c.owner == owner))).first()
                if anchor is None:
                    raise GatewayError(404, f"No such File object: {page.after}", param="after")
                key = (files.c.created_at, files.c.id)
                if page.descending:
                    query = query.where(sa.tuple_(*key) < sa.tuple_(anchor.created_at, page.after))
                else:
                    query = query.where(sa.tuple_(*key) > sa.tuple_(anchor.created_at, page.after))
            order = (files.c.created_at.desc(), files.c.id.desc()) if page.descending \
                else (files.c.created_at.asc(), files.c.id.asc())
            rows = (await connection.execute(query.order_by(*order).limit(page.limit + 1))).all()
        return [_record(row) for row in rows[:page.limit]], len(rows) > page.limit

    def content(self, record: FileRecord) -> AsyncIterator[bytes]:
        return self.blobs.read(record.id)

    # --- removing ----------------------------------------------------------------------------
    async def delete(self, owner: str, file_id: str) -> None:
        await self.get(owner, file_id)
        await self.delete_any(file_id)

    async def delete_any(self, file_id: str) -> None:
        async with self.db.begin() as connection:
            await connection.execute(sa.delete(files).where(files.c.id == file_id))
        await self.blobs.delete(file_id)

    async def sweep(self, *, limit: int = 100) -> int:
        """Remove expired files and abandoned uploads (their bytes too); how many."""
        async with self.db.begin() as connection:
            expired = (await connection.execute(sa.select(files.c.id).where(
                files.c.expires_at.is_not(None), files.c.expires_at <= time.time()).limit(limit))).scalars().all()
        for file_id in expired:
            await self.delete_any(file_id)
        return len(expired)


class Upload:
    """One upload's bytes on their way to storage, counted against the size limit and quota."""

    def __init__(self, files_: Files, file_id: str, owner: str, *, limit: int, too_large: GatewayError) -> None:
        self.files = files_
        self.file_id = file_id
        self.owner = owner
        self.limit = limit
        self.too_large = too_large
        self.size = 0
        self.writer = files_.blobs.writer(file_id)

    async def write(self, data: bytes) -> None:
        self.size += len(data)
        if self.size > self.limit:
            raise self.too_large
        await self.writer.write(data)

    async def complete(self, *, purpose: str, filename: str, expires_after: float | None) -> FileRecord:
        await self.writer.finish()
        return await self.files._record_upload(self, purpose=purpose, filename=filename, expires_after=expires_after)

    async def abort(self) -> None:
        await self.writer.abort()
        await self.files.delete_any(self.file_id)
