"""Why a request left the queue without being served: status-free, mapped to HTTP in ``gateway.http``.

Two kinds of refusal, because the client should act differently on each:

- **its own limit** (``own_limit``): the request's key (or team) had as many requests queued
  as it may, or its requests in flight were at its concurrency limit the whole time it waited.
  Sending less helps: HTTP 429.
- **the fleet is full**: the model's queue was full, or the engines stayed saturated for the
  whole wait, or a request of a higher band took its place in a full queue. Nothing the client
  does helps but waiting: HTTP 503.

Both carry ``retry_after`` (whole seconds), what the client should wait before trying again.
"""

from __future__ import annotations

# Reasons (short words: metric labels and error bodies).
QUEUE_FULL = "queue_full"            # the model's queue held FLOW_QUEUE_MAX requests
KEY_QUEUE_FULL = "key_queue_full"    # the key held FLOW_QUEUE_MAX_PER_KEY queued requests
TIMEOUT = "timeout"                  # waited FLOW_QUEUE_TIMEOUT_SECONDS
DISPLACED = "displaced"              # a full queue gave its place to a request of a higher band
CANCELLED = "cancelled"              # the client left while queued (counted, never answered)
SHUTDOWN = "shutdown"                # the gateway is stopping


class QueueRefused(Exception):
    """The request was not queued, or left the queue unserved."""

    def __init__(self, reason: str, message: str, *, own_limit: bool, retry_after: int) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.own_limit = own_limit
        self.retry_after = retry_after
