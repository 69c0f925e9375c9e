"""A small SSE client for session tests: events with their ids, keep-alive comments, [DONE]."""

from __future__ import annotations

from dataclasses import dataclass, field

import httpx
import orjson


@dataclass
class Event:
    id: str | None
    data: str

    @property
    def index(self) -> int:
        assert self.id is not None, f"event without id: {self.data[:80]}"
        return int(self.id.rpartition(":")[2])

    @property
    def done(self) -> bool:
        return self.data == "[DONE]"

    @property
    def json(self) -> dict:
        return orjson.loads(self.data)


@dataclass
class Received:
    status: int
    headers: httpx.Headers
    events: list[Event] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)
    body: bytes = b""
    cut: bool = False  # the server went away mid-stream

    @property
    def session_id(self) -> str | None:
        return self.headers.get("x-session-id")

    @property
    def indices(self) -> list[int]:
        return [event.index for event in self.events if event.id is not None]

    @property
    def dones(self) -> int:
        return sum(event.done for event in self.events)

    @property
    def content(self) -> str:
        return content_of(self.events)

    @property
    def last_id(self) -> str | None:
        ids = [event.id for event in self.events if event.id is not None]
        return ids[-1] if ids else None


def content_of(events: list[Event]) -> str:
    """The concatenated delta content of choice 0."""
    parts = []
    for event in events:
        if event.done or event.data.startswith('{"error"'):
            continue
        for choice in event.json.get("choices", ()):
            if choice.get("index", 0) == 0:
                parts.append((choice.get("delta") or {}).get("content") or "")
    return "".join(parts)


def parse_sse(lines) -> tuple[list[Event], list[str]]:
    events, comments = [], []
    event_id, data = None, []
    for line in lines:
        if line == "":
            if data:
                events.append(Event(event_id, "\n".join(data)))
            event_id, data = None, []
        elif line.startswith(":"):
            comments.append(line[1:].strip())
        elif line.startswith("id:"):
            event_id = line[3:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())
    return events, comments


async def read_stream(client: httpx.AsyncClient, method: str, url: str, *, json: dict | None = None,
                      headers: dict | None = None, stop_after: int | None = None, timeout: float = 60,
                      live: list[Event] | None = None) -> Received:
    """Read an SSE response; with ``stop_after`` drop the connection after that many events.

    ``live``: a list the events are appended to as they arrive (it becomes ``events`` of the
    result), for a caller that acts on the stream while another task reads it.
    """
    async with client.stream(method, url, json=json, headers=headers, timeout=timeout) as response:
        received = Received(response.status_code, response.headers, events=live if live is not None else [])
        if response.status_code != 200 or not response.headers.get("content-type", "").startswith("text/event-stream"):
            received.body = await response.aread()
            return received
        event_id, data = None, []
        try:
            async for line in response.aiter_lines():
                if line == "":
                    if data:
                        received.events.append(Event(event_id, "\n".join(data)))
                        if stop_after is not None and len(received.events) >= stop_after:
                            break
                    event_id, data = None, []
                elif line.startswith(":"):
                    received.comments.append(line[1:].strip())
                elif line.startswith("id:"):
                    event_id = line[3:].strip()
                elif line.startswith("data:"):
                    data.append(line[5:].strip())
        except (httpx.RemoteProtocolError, httpx.ReadError):
            received.cut = True
    return received


def fresh_client(base_url: str, **kwargs) -> httpx.AsyncClient:
    """A client whose connections are never reused: leaving a stream really disconnects.

    Plain HTTP to localhost only, so no TLS context (loading CA certificates
    takes tens of milliseconds, enough to blur the timing tests look at).
    """
    kwargs.setdefault("timeout", 60)  # a loaded machine can stall for seconds: not what is tested
    return httpx.AsyncClient(base_url=base_url, limits=httpx.Limits(max_keepalive_connections=0), verify=False,
                             **kwargs)
