"""SSE frames of a session: every event, ``[DONE]`` included, carries ``id: <session_id>:<index>``.

Frames are built once, by the producer, as the exact bytes a client receives
(``id: s:7\\ndata: {...}\\n\\n``), so replaying or following a session never
re-encodes anything. The endings the gateway writes itself (a cancelled
chunk, an error event) are built here too, in the engine's own shapes.
"""

from __future__ import annotations

import time
import zlib

import orjson

from gateway.sse import DONE, SEPARATOR, event_json, error_frame

# finish_reason of the chunk that ends a cancelled generation (not an OpenAI value:
# clients that switch on finish_reason see something they can tell apart).
CANCELLED_FINISH_REASON = "cancelled"

# Why a generation was cancelled, as written in the final chunk's "cancel_reason".
CANCEL_REQUEST = "cancel_request"              # POST /v1/cancel/{session_id}
CLIENT_DISCONNECTED = "client_disconnected"    # a session nobody named lost its last client
DISCONNECT_TIMEOUT = "disconnect_timeout"      # a named session was left alone too long


def id_prefix(session_id: str) -> bytes:
    """``id: <session_id>:``, the start of every frame of this session."""
    return b"id: " + session_id.encode() + b":"


def frame(prefix: bytes, index: int, event: bytes) -> bytes:
    """One framed event; ``event`` is ``data: ...`` without its blank line."""
    return b"".join((prefix, str(index).encode(), b"\n", event, SEPARATOR))


def done_frame(prefix: bytes, index: int) -> bytes:
    return frame(prefix, index, DONE)


def error_ending(prefix: bytes, index: int, message: str, *, code: str) -> list[bytes]:
    """An error event then ``[DONE]``: how a generation that broke ends."""
    event_id = prefix[4:] + str(index).encode()
    return [error_frame(message, code=code, event_id=event_id), done_frame(prefix, index + 1)]


def producer_lost_ending(session_id: str, index: int) -> list[bytes]:
    """How a generation whose producer died is ended by whoever notices."""
    message = "the generation was interrupted: the gateway producing it stopped"
    return error_ending(id_prefix(session_id), index, message, code="producer_lost")


def cancelled_event(*, first_event: bytes | None, fallback_id: str, model: object, choices: int, reason: str) -> bytes:
    """A ``chat.completion.chunk`` whose every choice ends with finish_reason "cancelled".

    It copies ``id``, ``created`` and ``model`` from the generation's first
    chunk, so it reads as the stream's own last chunk.
    """
    head = event_json(first_event) if first_event is not None else None
    head = head or {}
    chunk = {
        "id": head.get("id", fallback_id),
        "object": "chat.completion.chunk",
        "created": head.get("created", int(time.time())),
        "model": head.get("model", model),
        "choices": [
            {"index": i, "delta": {}, "logprobs": None, "finish_reason": CANCELLED_FINISH_REASON}
            for i in range(choices)
        ],
        "cancel_reason": reason,
    }
    return b"data: " + orjson.dumps(chunk)


def cancelled_ending(prefix: bytes, index: int, **chunk) -> list[bytes]:
    """The cancelled chunk then ``[DONE]``."""
    return [frame(prefix, index, cancelled_event(**chunk)), done_frame(prefix, index + 1)]


def split_frames(blob: bytes) -> list[bytes]:
    """Frames back to back -> one bytes per frame (JSON never holds a raw blank line)."""
    return [part + SEPARATOR for part in blob.split(SEPARATOR)[:-1]]


def pack_frames(frames: list[bytes]) -> bytes:
    """Frames as the store keeps them: back to back, zlib-compressed.

    Chunks of one stream repeat their id, model and field names in every event,
    so they shrink about 15x; at ~40 us per 5 KB that is far cheaper than writing
    the bytes to SQLite's WAL or sending them to PostgreSQL.
    """
    return zlib.compress(b"".join(frames), 1)


def unpack_frames(blob: bytes) -> list[bytes]:
    return split_frames(zlib.decompress(blob))
