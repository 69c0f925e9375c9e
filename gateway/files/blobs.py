"""Where a file's bytes live: chunks in the gateway's database, or one file each in a directory (``FILES_STORAGE``).

Both are written and read as a stream of chunks of at most ``CHUNK_BYTES``, so neither an
upload nor a download ever holds a whole file in memory. A directory blob is written to a
temporary name and renamed when complete, so a reader never sees half a file.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Protocol

import sqlalchemy as sa

from gateway.database.tables.jobs import file_chunks
from gateway.jobs.store import JobsDatabase

CHUNK_BYTES = 1024 * 1024


class BlobWriter(Protocol):
    async def write(self, data: bytes) -> None: ...
    async def finish(self) -> None: ...
    async def abort(self) -> None: ...


class Blobs(Protocol):
    name: str

    def writer(self, file_id: str) -> BlobWriter: ...
    def read(self, file_id: str) -> AsyncIterator[bytes]: ...
    async def delete(self, file_id: str) -> None: ...


class _Buffered:
    """Collects writes into chunks of ``CHUNK_BYTES`` and hands each full one to ``_put``."""

    def __init__(self) -> None:
        self._pending = bytearray()

    async def write(self, data: bytes) -> None:
        self._pending += data
        while len(self._pending) >= CHUNK_BYTES:
            chunk = bytes(self._pending[:CHUNK_BYTES])
            del self._pending[:CHUNK_BYTES]
            await self._put(chunk)

    async def _flush(self) -> None:
        if self._pending:
            chunk, self._pending = bytes(self._pending), bytearray()
            await self._put(chunk)

    async def _put(self, chunk: bytes) -> None:
        raise NotImplementedError


class DatabaseBlobs:
    name = "database"

    def __init__(self, db: JobsDatabase) -> None:
        self.db = db

    def writer(self, file_id: str) -> BlobWriter:
        return _DatabaseWriter(self, file_id)

    async def read(self, file_id: str) -> AsyncIterator[bytes]:
        seq = 0
        while True:
            async with self.db.begin() as connection:
                data = (await connection.execute(sa.select(file_chunks.c.data).where(
                    file_chunks.c.file_id == file_id, file_chunks.c.seq == seq))).scalar()
            if data is None:
                return
            yield bytes(data)
            seq += 1

    async def delete(self, file_id: str) -> None:
        async with self.db.begin() as connection:
            await connection.execute(sa.delete(file_chunks).where(file_chunks.c.file_id == file_id))


class _DatabaseWriter(_Buffered):
    def __init__(self, blobs: DatabaseBlobs, file_id: str) -> None:
        super().__init__()
        self.blobs = blobs
        self.file_id = file_id
        self.seq = 0

    async def _put(self, chunk: bytes) -> None:
        async with self.blobs.db.begin() as connection:
            await connection.execute(sa.insert(file_chunks).values(file_id=self.file_id, seq=self.seq, data=chunk))
        self.seq += 1

    async def finish(self) -> None:
        await self._flush()

    async def abort(self) -> None:
        await self.blobs.delete(self.file_id)


class DirectoryBlobs:
    name = "directory"

    def __init__(self, directory: str) -> None:
        self.directory = Path(directory)
        problem = directory_problem(self.directory)
        if problem is not None:  # refused at assembly: else every upload would be a 500
            raise ValueError(f"FILES_DIRECTORY ({directory}, with FILES_STORAGE=directory) {problem}")

    def path(self, file_id: str) -> Path:
        return self.directory / file_id  # ids are checked (jobs.ids) before they reach a path

    def writer(self, file_id: str) -> BlobWriter:
        self.directory.mkdir(parents=True, exist_ok=True)
        return _DirectoryWriter(self.path(file_id))

    async def read(self, file_id: str) -> AsyncIterator[bytes]:
        try:
            handle = await asyncio.to_thread(open, self.path(file_id), "rb")
        except FileNotFoundError:
            return
        try:
            while chunk := await asyncio.to_thread(handle.read, CHUNK_BYTES):
                yield chunk
        finally:
            handle.close()

    async def delete(self, file_id: str) -> None:
        await asyncio.to_thread(_unlink, self.path(file_id))


def directory_problem(directory: Path) -> str | None:
    """Why the gateway could not keep files in ``directory`` (made at the first upload if missing); None: it can."""
    existing = directory
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return "is not a directory" if existing == directory else f"lies under {existing}, which is no directory"
    if not os.access(existing, os.W_OK | os.X_OK):
        return "may not be written by this process" if existing == directory \
            else f"would be made in {existing}, which this process may not write"
    return None


def _unlink(path: Path) -> None:
    path.unlink(missing_ok=True)


class _DirectoryWriter(_Buffered):
    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self.partial = path.with_name(path.name + ".part")
        self.handle = None

    async def _put(self, chunk: bytes) -> None:
        if self.handle is None:
            self.handle = await asyncio.to_thread(open, self.partial, "wb")
        await asyncio.to_thread(self.handle.write, chunk)

    async def finish(self) -> None:
        await self._flush()
        if self.handle is None:
            self.handle = await asyncio.to_thread(open, self.partial, "wb")
        handle, self.handle = self.handle, None
        await asyncio.to_thread(_close_and_sync, handle)
        await asyncio.to_thread(os.replace, self.partial, self.path)

    async def abort(self) -> None:
        if self.handle is not None:
            self.handle.close()
            self.handle = None
        await asyncio.to_thread(_unlink, self.partial)


def _close_and_sync(handle) -> None:
    handle.flush()
    os.fsync(handle.fileno())
    handle.close()
