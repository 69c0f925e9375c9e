"""Stored responses: what the Responses API keeps of each response, and what a store of them must do.

A stored response is the response object as it stands (queued, in progress, then its final
status), the conversation a follow-up continues (``previous_response_id``), and who owns it.
They belong to the Responses API, not to sessions: a session is a generation's event stream
(a streamed or background response has one, named by the response id); the record is the
object ``GET /v1/responses/{id}`` returns. They live in the gateway's database, the same one
as the sessions (``SESSION_STORE``: SQLite or PostgreSQL), in the ``stored_responses`` table,
or in memory (``memory``/``off``, bounded).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

RUNNING_STATUSES = ("queued", "in_progress")
FINAL_STATUSES = ("completed", "incomplete", "failed", "cancelled")


@dataclass(slots=True)
class StoredResponse:
    owner: str            # Principal.key_id of the key that created it: nobody else sees it
    response_id: str
    status: str           # queued | in_progress | completed | incomplete | failed | cancelled
    background: bool      # produced by a background run (its events are the session ``response_id``)
    body: bytes           # the response object, JSON
    # JSON list of this response's own input items; the conversation before them is its
    # ``previous_id``'s (``chain.conversation``), so a chain stores each item once. A record
    # without ``previous_id`` holds its whole conversation (the records of earlier releases do).
    history: bytes
    root: str             # the first response of its conversation (an affinity key)
    created_at: float
    expires_at: float
    streamed: bool = False  # it was streamed through a session (``response_id``): its events can be replayed
    previous_id: str | None = None  # the response it continues (previous_response_id)

    @property
    def running(self) -> bool:
        return self.status in RUNNING_STATUSES

    @property
    def has_events(self) -> bool:
        """Whether its events were kept in a session (a background run, or a stream with sessions on)."""
        return self.background or self.streamed


class ResponseRecords(Protocol):
    """Where stored responses live."""

    async def open(self) -> None: ...
    async def close(self) -> None: ...
    async def save_response(self, record: StoredResponse) -> None:
        """Insert ``record`` (or replace the owner's record with the same id)."""
    async def update_response(self, owner: str, response_id: str, *, status: str, body: bytes,
                              from_statuses: tuple[str, ...] = RUNNING_STATUSES) -> bool:
        """Set status and body if the record's status is one of ``from_statuses`` (True if it was)."""
    async def load_response(self, owner: str, response_id: str) -> StoredResponse | None:
        """The owner's record, unless unknown, another key's, or expired."""
    async def delete_response(self, owner: str, response_id: str) -> bool: ...
    async def keep_until(self, owner: str, response_ids: list[str], expires_at: float) -> None:
        """Keep the owner's ``response_ids`` at least until ``expires_at`` (a chain lives as long as its last)."""
    async def usage(self, owner: str) -> tuple[int, int]:
        """The owner's stored responses not expired: how many, and the bytes they take as stored."""
    async def expire(self) -> int:
        """Delete the records past their expiry; how many."""
