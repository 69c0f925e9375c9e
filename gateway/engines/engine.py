"""One engine of the fleet: where it is, how to reach it, and what the gateway knows of it.

The gateway learns an engine's health from its own looks (``/health`` + ``/v1/models``, see
``engines.state``), its load from the engine's ``/metrics`` (``engines.scrape``) and from its
own count of the requests it has open there, and its failures from the requests it sends.

Load: the engine's score is ``running + 4 x waiting`` as last scraped, plus the requests this
gateway sent since that scrape, and never less than this gateway's own open requests. A
waiting request weighs more than a running one: it means the engine has no free slot (its
batch or KV cache is full), so another request sent there waits too. (vLLM's own
data-parallel balancer scores ``max(inflight, waiting + running)`` and penalises waiting only
above 50 % KV-cache use; on the CPU engines the KV gauge stays near 0, so the waiting weight
here is constant.) Counting its own requests between scrapes is what keeps a burst from
landing on one engine: each pick raises the score at once.

Ejection: an engine that failed a request (refused, reset, 503, died or stalled mid-stream) gets
no request for ``ENGINE_EJECT_SECONDS``, doubled for each ejection in a row (at most a minute);
it is admitted again once that passed and its looks say it is ready. A request that succeeds
ends the run of ejections.
"""

from __future__ import annotations

import hashlib
import os
import time
from urllib.parse import urlsplit

from yarl import URL

from gateway.engines.scrape import Load

WAITING_WEIGHT = 4.0
EJECT_CAP_SECONDS = 60.0


def display_url(url: str) -> str:
    """``url`` without credentials (userinfo), as shown in /health, logs and metric labels."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    return parts._replace(netloc=netloc).geturl()


def stable_hash(text: str) -> int:
    """A 64-bit hash that is the same in every process (``hash()`` is salted per process)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


class Engine:
    __slots__ = (
        "id", "base_url", "hash", "headers", "_urls",
        "ready", "reachable", "models", "cards", "max_model_len", "root", "last_error", "error_kind",
        "checked_at", "timeouts_in_a_row",
        "ejected_until", "failures_in_a_row",
        "load", "scraped_at", "inflight", "inflight_at_scrape",
        "counters",
    )

    def __init__(self, base_url: str, api_key: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.id = display_url(self.base_url)  # the same on every gateway replica: routing hashes it
        self.hash = stable_hash(self.id)
        self.headers = {"content-type": "application/json"}
        if api_key:
            self.headers["authorization"] = f"Bearer {api_key}"
        self._urls: dict[str, URL] = {}  # parsed once per path: yarl parsing is per-request cost
        # What the looks found.
        self.ready = False
        self.reachable = False
        self.models: list[str] = []        # last listed (kept while it is down: its models are known)
        self.cards: list[dict] = []
        self.max_model_len: int | None = None
        self.root: str | None = None
        self.last_error: str | None = None  # for logs and authenticated views
        self.error_kind: str | None = None  # a short word, safe for public bodies
        self.checked_at = 0.0
        self.timeouts_in_a_row = 0
        # Failures of requests.
        self.ejected_until = 0.0
        self.failures_in_a_row = 0
        # Load.
        self.load: Load | None = None
        self.scraped_at = 0.0
        self.inflight = 0
        self.inflight_at_scrape = 0
        self.counters = None  # per-engine metric children (set by the fleet)

    def __repr__(self) -> str:
        return f"Engine({self.id!r}, ready={self.ready}, inflight={self.inflight})"

    def url(self, path: str) -> URL:
        url = self._urls.get(path)
        if url is None:
            url = self._urls[path] = URL(self.base_url + path)
        return url

    def request_headers(self, request_id: str | None, content_type: str | None = None) -> dict[str, str]:
        """The headers of one attempt. Its ``x-request-id`` is the request's id plus a suffix of its
        own: vLLM takes the header as its request id and refuses (and multi-server engines have
        crashed on, vllm #27711) a duplicate, and a client chooses its id, may reuse it, and one
        request may be tried on several engines. The client's id stays the prefix, so the engine's
        logs still lead back to the gateway's access log."""
        if request_id is None and content_type is None:
            return self.headers
        headers = dict(self.headers)
        if request_id is not None:
            headers["x-request-id"] = upstream_request_id(request_id)
        if content_type is not None:  # a body that is not JSON (multipart audio uploads)
            headers["content-type"] = content_type
        return headers

    # --- load ---------------------------------------------------------------------------
    def score(self) -> float:
        own = self.inflight
        load = self.load
        if load is None:
            return float(own)
        since = own - self.inflight_at_scrape
        scraped = load.running + WAITING_WEIGHT * load.waiting + (since if since > 0 else 0)
        return scraped if scraped > own else float(own)

    def scraped(self, load: Load | None) -> None:
        self.load = load
        self.inflight_at_scrape = self.inflight
        self.scraped_at = time.monotonic()

    # --- failures -----------------------------------------------------------------------
    def routable(self, now: float) -> bool:
        return self.ready and now >= self.ejected_until

    @property
    def ejected(self) -> bool:
        return time.monotonic() < self.ejected_until

    def eject(self, base_seconds: float, *, kind: str, message: str) -> float:
        """No request for a while (longer for each ejection in a row); returns the seconds left.

        Failures while already ejected (the requests that were open when the engine died, all
        failing at once) are one incident: they neither extend nor double the ejection.
        """
        now = time.monotonic()
        self.error_kind, self.last_error = kind, message
        if now < self.ejected_until:
            return self.ejected_until - now
        self.failures_in_a_row += 1
        seconds = min(EJECT_CAP_SECONDS, base_seconds * 2 ** min(self.failures_in_a_row - 1, 10))
        self.ejected_until = now + seconds
        return seconds

    def succeeded(self) -> None:
        if self.failures_in_a_row:
            self.failures_in_a_row = 0


def upstream_request_id(request_id: str) -> str:
    """``request_id`` made unique for one attempt at an engine (``<request_id>-<8 hex digits>``)."""
    return f"{request_id}-{os.urandom(4).hex()}"

