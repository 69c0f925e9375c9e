"""Standard Webhooks signatures: ``v1,<base64 HMAC-SHA256 of "id.timestamp.body">`` under a ``whsec_`` secret.

The secret is ``whsec_`` followed by base64 of random bytes; the HMAC key is those bytes (the
Standard Webhooks libraries, and OpenAI's SDK ``client.webhooks.unwrap``, verify it this way).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

PREFIX = "whsec_"
SECRET_BYTES = 32


def new_secret() -> str:
    return PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def _key(secret: str) -> bytes:
    return base64.b64decode(secret.removeprefix(PREFIX))


def signature(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def headers(secret: str, message_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    return {"webhook-id": message_id, "webhook-timestamp": str(timestamp),
            "webhook-signature": signature(secret, message_id, timestamp, body),
            "content-type": "application/json"}


def verify(secret: str, message_id: str, timestamp: int, body: bytes, header: str) -> bool:
    """Whether any ``v1,`` signature in ``header`` (space-separated) is the one expected."""
    expected = signature(secret, message_id, timestamp, body)
    return any(hmac.compare_digest(expected, candidate) for candidate in header.split())
