"""What one key may keep of stored responses, and how large a continued conversation may grow.

Stored responses live for ``RESPONSES_RETENTION_SECONDS`` (30 days by default): without a bound
per key, one key could fill the database. A request that would store one more response is
refused (429, ``responses_quota_exceeded``) while its key holds ``RESPONSES_MAX_PER_KEY``
responses or ``RESPONSES_MAX_BYTES_PER_KEY`` bytes of them (as stored: compressed); deleting
responses (``DELETE /v1/responses/{id}``) or their expiry makes room. One count query per
stored request (an index range on the owner).

A ``previous_response_id`` request is rebuilt from the stored conversation plus the new input;
the body sent to the engine is held to ``MAX_BODY_BYTES`` like any body a client sends (413
naming ``previous_response_id``), so a long chain cannot grow past what one request may be.
"""

from __future__ import annotations

from gateway.config import Settings
from gateway.failures import LimitReached
from gateway.http.errors import GatewayError
from gateway.protocols.responses.prepare import ResponsesRequest
from gateway.protocols.responses.records.base import ResponseRecords


async def check_room(records: ResponseRecords, owner: str, settings: Settings) -> None:
    """``LimitReached`` if ``owner`` may not store another response now."""
    count, size = await records.usage(owner)
    if count >= settings.responses_max_per_key or size >= settings.responses_max_bytes_per_key:
        raise LimitReached(
            f"this API key keeps {count} stored responses ({size} bytes); at most "
            f"{settings.responses_max_per_key} and {settings.responses_max_bytes_per_key} bytes may be kept: delete "
            "some (DELETE /v1/responses/{id}), wait for them to expire, or send 'store': false",
            param="store", code="responses_quota_exceeded")


def check_rebuilt(request: ResponsesRequest, max_body_bytes: int) -> None:
    """A 413 if the body rebuilt from the stored conversation is larger than a request may be."""
    if request.previous_response_id is not None and len(request.engine_body) > max_body_bytes:
        size = len(request.engine_body)
        raise GatewayError(413, f"the conversation of previous_response_id with this input is {size} bytes, more "
                                f"than a request may be ({max_body_bytes} bytes, MAX_BODY_BYTES): start a new "
                                "conversation", param="previous_response_id", code="request_too_large")
