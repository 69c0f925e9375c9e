"""What the relay needs to know about one protocol's event stream: a dialect.

The relay (``relay.pump``, ``relay.run``) moves events without understanding them. Each
protocol that streams (OpenAI chat and completions, Responses, Anthropic Messages) supplies a
:class:`StreamDialect`:

- a :class:`StreamTracker` per stream, which accounts for the events of each engine read
  (usage, finish reason, the text when a caller asked for it), says which to relay (the
  OpenAI usage-only chunk is dropped for a client that did not ask for it) and when the
  protocol's terminal event went by;
- the events that end a stream the gateway has to end itself (``relay.ending`` decides which):
  an in-band error (the response has started, so no HTTP status can say it), or a cancelled
  generation;
- whether an event is the stream's last (a follower of a stored session stops there).

How to produce a stream again on another engine depends on the request, not only the
protocol: the protocol's ``prepare`` attaches it to the call (``relay.continuation``).
Adding a streamed protocol is one new dialect module in its protocol package.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(slots=True)
class StreamResult:
    """What a finished stream produced: usage, finish reason and (when asked) the text."""

    text: str = ""
    finish_reason: str | None = None
    usage: dict | None = None       # {"prompt_tokens": n, "completion_tokens": m}
    how: str = "completed"          # completed | client_disconnect | cancelled | error
    error: str | None = None
    content_events: int | None = 0  # None: not counted by the tracker (the caller's log knows)
    preamble_events: int = 0        # counted events that carry no token (OpenAI's role chunk)

    def estimated_usage(self) -> dict | None:
        """For streams cut before the engine reported usage: one content event per decoded token.

        vLLM emits one event per decode step (per choice), so the count of content
        events, less the preamble that carries no token, is the completion tokens generated
        before the abort. Prompt tokens are unknown then and not counted.
        """
        tokens = (self.content_events or 0) - self.preamble_events
        if tokens <= 0:
            return None
        return {"prompt_tokens": 0, "completion_tokens": tokens}

    def counted_usage(self) -> dict | None:
        return self.usage or self.estimated_usage()


class StreamTracker(Protocol):
    ended: bool  # the protocol's terminal event was accepted

    def accept(self, block: bytes) -> bytes:
        """Account for the whole events one engine read completed (a block ending in a blank line).

        Returns the block to relay: ``block`` itself when nothing in it must change (the
        common case, which must stay cheap: it runs once per engine read), else the events
        to relay, still as one block ending in a blank line (b"" for none).
        """

    def result(self) -> StreamResult: ...

    # Optional: ``rewind(delivered: int)``, for a tracker that holds an event back until the next one
    # (the Responses API's last ``response.output_item.done``): the stream goes on on another engine
    # after the ``delivered`` events clients have (``relay.switch``), so a held event is dropped.


class StreamDialect(Protocol):
    name: str

    def tracker(self, *, relay_usage: bool, collect_text: bool, count_events: bool = True,
                finish_reason: bool = False) -> StreamTracker:
        """A tracker for one stream. ``relay_usage``: the client asked for the usage event;
        ``count_events`` false: the caller counts the events itself (a tracker may still);
        ``finish_reason``: the caller wants the finish reason (a trace) even when it does not
        collect the text (a tracker that reads it anyway may ignore this)."""

    def error_events(self, message: str, code: str) -> list[bytes]:
        """The events that end a stream in error, after it started (e.g. error event + [DONE])."""

    def is_last(self, frame: bytes) -> bool:
        """Whether ``frame`` (an event with its blank line, maybe an ``id:`` line) ends the stream."""

    def cancelled_events(self, *, first_event: bytes | None, reason: str, run_id: str,
                         model: object, choices: int, usage: dict | None = None) -> list[bytes]:
        """The events that end a cancelled generation, shaped like the stream's own (ids copied from
        ``first_event``; without one, made from ``run_id``, the gateway's id of the run). ``usage``:
        what the generation used before the stop, as the gateway counted it
        (:meth:`StreamResult.counted_usage`; None when unknown), for an ending that reports it."""
