"""A finished span as the gateway records it: plain values, straight into the batch processor's queue.

``RequestTrace`` fills a :class:`Span` as the request goes and hands it, once ended, to the
SDK's batch processor's queue (its bounds, schedule, flush and shutdown are the SDK's); the
gateway's OTLP exporters (``otlp_http``, ``otlp_grpc``) encode it directly
(``otlp_encoding.encode_recorded``). Making the SDK's ``ReadableSpan`` (and its
``SpanContext``, ``Event``s, ``BoundedList``) for each span, then reading them back through
their properties, was about a third of a traced request's tracing CPU. Any other exporter
(a test's ``InMemorySpanExporter``, a plugin's) gets ``ReadableSpan``s: :class:`SdkSpans`
makes them from these, in the export thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode

UNSET = Status(StatusCode.UNSET)
MAX_EVENTS = 128  # a span's events: the SDK's default OTEL_SPAN_EVENT_COUNT_LIMIT


class Span:
    """One span of a request: ids, name, kind, times, attributes (a dict), events, status.

    ``events``: None or a list of ``(name, time_ns, attributes or None)``; past ``MAX_EVENTS`` the
    oldest are dropped and counted (``dropped_events``), as the SDK's span does. ``parent_id``:
    the parent's span id (None: a root), ``remote_parent``: it came from a caller's ``traceparent``.
    ``origin``: the ``Tracing``'s resource and instrumentation scope, shared by its spans.
    """

    __slots__ = ("name", "kind", "trace_id", "span_id", "flags", "trace_state", "parent_id", "remote_parent",
                 "start", "end", "attributes", "events", "dropped_events", "status", "origin")

    def __init__(self, origin, name: str, kind: SpanKind, trace_id: int, span_id: int, flags: int, trace_state,
                 parent_id: int | None, remote_parent: bool, start: int, attributes: dict[str, Any]) -> None:
        self.origin = origin
        self.name = name
        self.kind = kind
        self.trace_id = trace_id
        self.span_id = span_id
        self.flags = flags
        self.trace_state = trace_state
        self.parent_id = parent_id
        self.remote_parent = remote_parent
        self.start = start
        self.end = 0
        self.attributes = attributes
        self.events = None
        self.dropped_events = 0
        self.status = UNSET

    def add_event(self, name: str, attributes: dict[str, Any] | None, when: int) -> None:
        events = self.events
        if events is None:
            self.events = [(name, when, attributes)]
            return
        if len(events) >= MAX_EVENTS:
            del events[0]
            self.dropped_events += 1
        events.append((name, when, attributes))

    def readable(self):
        """The SDK's ``ReadableSpan`` of this span (for exporters other than the gateway's)."""
        from opentelemetry.sdk.trace import Event, ReadableSpan
        from opentelemetry.sdk.util import BoundedList
        from opentelemetry.trace import TraceFlags

        resource, scope = self.origin
        flags = TraceFlags(self.flags)
        context = SpanContext(self.trace_id, self.span_id, False, flags, self.trace_state)
        parent = None
        if self.parent_id is not None:
            parent = SpanContext(self.trace_id, self.parent_id, self.remote_parent, flags, self.trace_state)
        events = BoundedList(MAX_EVENTS)
        for name, when, attributes in self.events or ():
            events.append(Event(name, attributes, when))
        events.dropped = self.dropped_events
        return ReadableSpan(name=self.name, context=context, parent=parent, resource=resource,
                            attributes=self.attributes, events=events, kind=self.kind, status=self.status,
                            start_time=self.start, end_time=self.end, instrumentation_scope=scope)


class SdkSpans:
    """An exporter of the SDK's spans, given the gateway's: each batch made ``ReadableSpan``s first."""

    def __init__(self, exporter) -> None:
        self.exporter = exporter

    def export(self, spans: Sequence[Span]):
        return self.exporter.export([span.readable() for span in spans])

    def shutdown(self, *args, **kwargs):
        return self.exporter.shutdown(*args, **kwargs)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.exporter.force_flush(timeout_millis)
