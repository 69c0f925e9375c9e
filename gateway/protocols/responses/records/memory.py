"""Stored responses in process memory: for ``SESSION_STORE=memory`` (and ``off``), which keep no database.

Bounded: at most ``max_records`` responses, the oldest forgotten first, and none past its
expiry. Lost when the process stops, like everything else these modes keep.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import replace

from gateway.protocols.responses.records.base import RUNNING_STATUSES, StoredResponse


class MemoryResponses:
    def __init__(self, *, max_records: int) -> None:
        self.max_records = max_records
        self._records: OrderedDict[tuple[str, str], StoredResponse] = OrderedDict()

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def save_response(self, record: StoredResponse) -> None:
        key = (record.owner, record.response_id)
        self._records.pop(key, None)
        self._records[key] = record
        self._prune()

    async def update_response(self, owner: str, response_id: str, *, status: str, body: bytes,
                              from_statuses: tuple[str, ...] = RUNNING_STATUSES) -> bool:
        record = await self.load_response(owner, response_id)
        if record is None or record.status not in from_statuses:
            return False
        self._records[(owner, response_id)] = replace(record, status=status, body=body)
        return True

    async def load_response(self, owner: str, response_id: str) -> StoredResponse | None:
        record = self._records.get((owner, response_id))
        if record is not None and record.expires_at < time.time():
            del self._records[(owner, response_id)]
            return None
        return record

    async def delete_response(self, owner: str, response_id: str) -> bool:
        return self._records.pop((owner, response_id), None) is not None

    async def keep_until(self, owner: str, response_ids: list[str], expires_at: float) -> None:
        for response_id in response_ids:
            record = self._records.get((owner, response_id))
            if record is not None and record.expires_at < expires_at:
                self._records[(owner, response_id)] = replace(record, expires_at=expires_at)

    async def usage(self, owner: str) -> tuple[int, int]:
        now = time.time()
        mine = [record for (who, _), record in self._records.items() if who == owner and record.expires_at >= now]
        return len(mine), sum(len(record.body) + len(record.history) for record in mine)

    async def expire(self) -> int:
        before = len(self._records)
        self._prune()
        return before - len(self._records)

    def _prune(self) -> None:
        while len(self._records) > self.max_records:
            self._records.popitem(last=False)
        now = time.time()
        while self._records:  # the oldest first: stop at the first one still kept
            key, oldest = next(iter(self._records.items()))
            if oldest.expires_at >= now:
                break
            del self._records[key]
