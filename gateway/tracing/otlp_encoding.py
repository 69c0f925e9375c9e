"""Finished spans -> an OTLP ``ExportTraceServiceRequest``, written as protobuf bytes directly.

The SDK's encoder (``opentelemetry.exporter.otlp.proto.common``) builds a protobuf object per
span, per attribute and per value, then serializes them: about 120 us per traced request (its
two spans and their 30 attributes) on this machine, more than the spans cost to record. This
writes the same message field by field: the attribute keys, the resource and the scope are
encoded once and reused; a span's bytes are joined once. Same input, same message: a test
decodes both with ``opentelemetry-proto`` and compares them (tests/gateway/tracing/test_otlp_encoding.py).

The wire format: each field is a tag (field number << 3 | wire type) then a varint, 8 bytes
(fixed64, double) or a length and bytes (strings, bytes, messages). Proto3 leaves out fields
at their default (0, "", empty), as the SDK's encoder does; a value in ``AnyValue``'s oneof is
written even when it is the default. Field numbers: opentelemetry-proto's trace/v1,
common/v1, resource/v1 and collector/trace/v1 ``.proto`` files.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.trace import SpanKind, StatusCode

from gateway.tracing.spans import UNSET, Span

_double = struct.Struct("<d").pack
_fixed64 = struct.Struct("<Q").pack
_fixed32 = struct.Struct("<I").pack
_SMALL = [bytes((n,)) for n in range(128)]

# Span.flags (the SDK's): "has is-remote" always; "is remote" when the parent came from a caller.
_FLAGS_LOCAL = b"\x85\x01" + _fixed32(0x100)
_FLAGS_REMOTE = b"\x85\x01" + _fixed32(0x300)
_KINDS = {kind: b"\x30" + _SMALL[kind.value + 1] for kind in SpanKind}  # the proto's SpanKind is the API's + 1
_KIND_FIELDS = [_KINDS[SpanKind(value)] for value in range(len(SpanKind))]  # by value: an Enum hashes in Python
_IDS = struct.Struct(">HQQHQ").pack  # trace_id (field 1, 16 bytes) and span_id (field 2, 8 bytes), big-endian
_PARENT = struct.Struct(">HQ").pack  # parent_span_id (field 4)
_TIMES = struct.Struct("<BQBQ").pack  # start and end (fields 7 and 8, fixed64)
_LOW64 = (1 << 64) - 1
_CODES = {code: b"\x18" + _SMALL[code.value] if code.value else b"" for code in StatusCode}
_keys: dict[str, bytes] = {}  # attribute key -> KeyValue.key field (keys are few: the conventions' names)
# field tag -> (key, value, type of value) -> the whole field: tag, length, KeyValue
_fields: dict[bytes, dict[tuple[str, Any, type], bytes]] = {}
_KEPT = frozenset({str, int, bool, float, tuple})  # the value types whose fields are kept
# Attributes whose values are one request's own: not worth keeping (they would push the rest out).
UNIQUE_KEYS = frozenset({"gateway.request_id", "gen_ai.response.id", "gateway.session.id",
                         "gateway.continuation.reason", "gen_ai.response.time_to_first_chunk"})
_MAX_PAIRS = 8192
_NO_FIELDS = itertools.repeat(b"")  # (the default of each kept field's lookup)


def _varint(value: int) -> bytes:
    if value < 0x80:
        return _SMALL[value]
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _delimited(tag: bytes, data: bytes) -> bytes:
    return tag + _varint(len(data)) + data


_STATUSES = {code: _delimited(b"\x7a", encoded) for code, encoded in _CODES.items()}  # without a description
_UNSET_STATUS = _STATUSES[StatusCode.UNSET]


def _text(tag: bytes, text: str) -> bytes:
    data = text.encode("utf-8")
    return tag + _varint(len(data)) + data


def _any_value(value: Any) -> bytes:
    """An ``AnyValue`` message (the same choices, in the same order, as the SDK's encoder)."""
    if value is None:
        return b""
    kind = type(value)
    if kind is str:
        return _text(b"\x0a", value)
    if kind is bool:
        return b"\x10\x01" if value else b"\x10\x00"
    if kind is int:
        return b"\x18" + _varint(value if value >= 0 else value + (1 << 64))
    if kind is float:
        return b"\x21" + _double(value)
    if kind is tuple or kind is list:
        return _delimited(b"\x2a", b"".join([_delimited(b"\x0a", _any_value(item)) for item in value]))
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, str):
        return _text(b"\x0a", value)
    if isinstance(value, int):
        return b"\x18" + _varint(value if value >= 0 else value + (1 << 64))
    if isinstance(value, float):
        return b"\x21" + _double(value)
    if isinstance(value, bytes):
        return _delimited(b"\x3a", value)
    if isinstance(value, Sequence):
        return _delimited(b"\x2a", b"".join([_delimited(b"\x0a", _any_value(item)) for item in value]))
    if isinstance(value, Mapping):
        return _delimited(b"\x32", _attributes(b"\x0a", value))
    raise TypeError(f"Invalid type {type(value)} of value {value}")


def _key(key: str) -> bytes:
    encoded = _keys.get(key)
    if encoded is None:
        if len(_keys) >= 4096:  # keys are the code's own names; a bound all the same
            _keys.clear()
        encoded = _keys[key] = _text(b"\x0a", str(key))
    return encoded


def _attributes(tag: bytes, attributes: Mapping[str, Any] | None) -> bytes:
    """``attributes`` as repeated ``KeyValue`` fields numbered by ``tag``.

    Most pairs are the same from request to request (the operation, the provider, the model,
    the routing policy, the engine, the status code, the token counts): each one's whole field
    (tag, length, ``KeyValue``) is kept by its key, value and the value's type (``True == 1 ==
    1.0``, but each is written apart), and a span's are looked up in one pass in C (``map``);
    only the pairs not kept yet are written here, one by one (:func:`_field`).
    """
    if not attributes:
        return b""
    if type(attributes) is BoundedAttributes:  # its own dict: the mapping's items() goes through __getitem__
        attributes = attributes._dict
    cache = _fields.get(tag)
    if cache is None:
        cache = _fields[tag] = {}
    try:  # (a field not kept comes back as b"": no field is empty, and b"" is one object, found by identity)
        values = attributes.values()
        fields = list(map(cache.get, zip(attributes, values, map(type, values), strict=False), _NO_FIELDS))
    except TypeError:  # a list or a map among the values (unhashable): all written here
        fields = [b""] * len(attributes)
    missing = fields.count(b"")
    if missing:
        keys = list(attributes)
        index = -1
        for _ in range(missing):
            index = fields.index(b"", index + 1)
            key = keys[index]
            fields[index] = _field(cache, tag, key, attributes[key])
    return b"".join(fields)


def _field(cache: dict, tag: bytes, key: str, value: Any) -> bytes:
    """One attribute's field, kept in ``cache`` unless its value is unique to a request
    (``UNIQUE_KEYS``), an array of anything but text, a map, or of a type of its own."""
    kind = type(value)
    if kind is str and key in UNIQUE_KEYS:  # (a request's own text, e.g. its id: written at once, never kept)
        data = value.encode("utf-8")
        size = len(data)
        name = _keys.get(key) or _key(key)
        if size < 124 and len(name) + size < 124:  # (every length one byte: the common case, in one join)
            return b"".join((tag, _SMALL[len(name) + size + 4], name, b"\x12", _SMALL[size + 2], b"\x0a",
                             _SMALL[size], data))
    field = _delimited(tag, _key(key) + _delimited(b"\x12", _any_value(value)))
    if key in UNIQUE_KEYS or kind not in _KEPT:
        return field
    if kind is tuple and not all(type(item) is str for item in value):  # ((1,) == (True,))
        return field
    if len(cache) >= _MAX_PAIRS:
        cache.clear()
    cache[(key, value, kind)] = field
    return field


def encode_recorded(span) -> bytes:
    """One of the gateway's own spans (a ``spans.Span``) as a ``Span`` message, without its field tag:
    the bytes :func:`encode_span` writes for its ``ReadableSpan``, read from plain values."""
    trace_id = span.trace_id
    head = _IDS(0x0A10, trace_id >> 64, trace_id & _LOW64, 0x1208, span.span_id)
    state = span.trace_state
    if state:
        head += _text(b"\x1a", ",".join(f"{key}={value}" for key, value in state.items()))
    parent = span.parent_id
    if parent is not None:
        head += _PARENT(0x2208, parent)
    name = span.name.encode("utf-8")
    parts = [head, b"\x2a", _varint(len(name)), name, _KIND_FIELDS[span.kind._value_],
             _TIMES(0x39, span.start, 0x41, span.end), _attributes(b"\x4a", span.attributes)]
    events = span.events
    if events:
        for name, when, attributes in events:
            parts.append(_delimited(b"\x5a", b"\x09" + _fixed64(when) + _text(b"\x12", name)
                                    + _attributes(b"\x1a", attributes)))
        if span.dropped_events:
            parts.append(b"\x60" + _varint(span.dropped_events))
    status = span.status
    if status is UNSET:  # (most spans: no Enum hash, no property read)
        parts.append(_UNSET_STATUS)
    else:
        description = status.description
        parts.append(_STATUSES[status.status_code] if not description else
                     _delimited(b"\x7a", _text(b"\x12", description) + _CODES[status.status_code]))
    parts.append(_FLAGS_REMOTE if parent is not None and span.remote_parent else _FLAGS_LOCAL)
    return b"".join(parts)


def recorded_field(span) -> bytes:
    """:func:`encode_recorded` as a ``ScopeSpans.spans`` field (tag and length): what a batch joins."""
    body = encode_recorded(span)
    return b"\x12" + _varint(len(body)) + body


def _event(event) -> bytes:
    body = (b"\x09" + _fixed64(event.timestamp) + _text(b"\x12", event.name)
            + _attributes(b"\x1a", event.attributes))
    dropped = event.dropped_attributes
    if dropped:
        body += b"\x20" + _varint(dropped)
    return _delimited(b"\x5a", body)


def _link(link) -> bytes:
    context = link.context
    body = (_delimited(b"\x0a", context.trace_id.to_bytes(16, "big"))
            + _delimited(b"\x12", context.span_id.to_bytes(8, "big")) + _attributes(b"\x22", link.attributes))
    if link.dropped_attributes:
        body += b"\x28" + _varint(link.dropped_attributes)
    body += b"\x35" + _fixed32(0x300 if context.is_remote else 0x100)
    return _delimited(b"\x6a", body)


def encode_span(span) -> bytes:
    """One finished span (a ``ReadableSpan``) as a ``Span`` message, without its field tag."""
    context = span.get_span_context()
    parts = [b"\x0a\x10", context.trace_id.to_bytes(16, "big"), b"\x12\x08", context.span_id.to_bytes(8, "big")]
    state = context.trace_state
    if state:
        parts.append(_text(b"\x1a", ",".join(f"{key}={value}" for key, value in state.items())))
    parent = span.parent
    if parent is not None:
        parts.append(b"\x22\x08")
        parts.append(parent.span_id.to_bytes(8, "big"))
    parts.append(_text(b"\x2a", span.name))
    parts.append(_KINDS[span.kind])
    parts.append(b"\x39")
    parts.append(_fixed64(span.start_time))
    parts.append(b"\x41")
    parts.append(_fixed64(span.end_time))
    # (the SDK's span keeps its attributes in ``_attributes``: ``attributes`` is a read-only view of them,
    # whose items() goes through two mappings' __getitem__ per attribute)
    parts.append(_attributes(b"\x4a", getattr(span, "_attributes", None) or span.attributes))
    if span.dropped_attributes:
        parts.append(b"\x50" + _varint(span.dropped_attributes))
    for event in span.events:
        parts.append(_event(event))
    if span.dropped_events:
        parts.append(b"\x60" + _varint(span.dropped_events))
    for link in span.links:
        parts.append(_link(link))
    if span.dropped_links:
        parts.append(b"\x70" + _varint(span.dropped_links))
    status = span.status
    if status is not None:
        body = b""
        if status.description:
            body = _text(b"\x12", status.description)
        body += _CODES[status.status_code]
        parts.append(_delimited(b"\x7a", body))
    parts.append(_FLAGS_REMOTE if parent is not None and parent.is_remote else _FLAGS_LOCAL)
    return b"".join(parts)


class OtlpEncoder:
    """Encodes batches of finished spans; a resource's and a scope's bytes are kept from batch to batch.

    A batch may hold the SDK's spans, the gateway's (``spans.Span``), and the gateway's already
    encoded (``bytes``: :func:`recorded_field`, made as each span ended, so that the queue holds
    bytes rather than objects the garbage collector walks), whose resource and scope are
    ``origin``'s (the ``Tracing`` that owns the exporter sets it).
    """

    def __init__(self) -> None:
        self._resources: dict[Any, bytes] = {}
        self._scopes: dict[Any, bytes] = {}
        self.origin: tuple | None = None  # (resource, instrumentation scope) of the spans that come encoded

    def encode(self, spans: Sequence) -> bytes:
        """An ``ExportTraceServiceRequest``: the spans grouped by resource, then by instrumentation scope."""
        groups: dict[int, tuple[Any, dict[Any, list[bytes]]]] = {}  # by id: a Resource hashes through JSON
        recorded: dict[int, tuple[tuple, list[bytes]]] = {}  # the gateway's spans, by their origin
        encoded = [span for span in spans if type(span) is bytes]
        if encoded:
            recorded[id(self.origin)] = (self.origin, encoded)
            if len(encoded) == len(spans):
                spans = ()
        for span in spans:
            if type(span) is bytes:
                continue
            if type(span) is Span:
                origin = span.origin
                bodies = recorded.get(id(origin))
                if bodies is None:
                    bodies = recorded[id(origin)] = (origin, [])
                body = encode_recorded(span)
                bodies[1].extend((b"\x12", _varint(len(body)), body))
                continue
            body = encode_span(span)
            resource = span.resource
            group = groups.get(id(resource))
            if group is None:
                group = groups[id(resource)] = (resource, {})
            group[1].setdefault(span.instrumentation_scope or None, []).extend((b"\x12", _varint(len(body)), body))
        for (resource, scope), bodies in recorded.values():
            group = groups.get(id(resource))
            if group is None:
                group = groups[id(resource)] = (resource, {})
            group[1].setdefault(scope, []).extend(bodies)
        out = []
        for resource, scopes in groups.values():
            parts = [self._resource(resource)]
            for scope, encoded in scopes.items():
                parts.append(_delimited(b"\x12", self._scope(scope) + b"".join(encoded)
                                        + (_text(b"\x1a", scope.schema_url) if scope is not None
                                           and scope.schema_url else b"")))
            if resource.schema_url:
                parts.append(_text(b"\x1a", resource.schema_url))
            out.append(_delimited(b"\x0a", b"".join(parts)))
        return b"".join(out)

    def _resource(self, resource) -> bytes:
        """ResourceSpans.resource (field 1)."""
        encoded = self._resources.get(resource)
        if encoded is None:
            if len(self._resources) > 16:
                self._resources.clear()
            encoded = self._resources[resource] = _delimited(b"\x0a", _attributes(b"\x0a", resource.attributes))
        return encoded

    def _scope(self, scope) -> bytes:
        """ScopeSpans.scope (field 1)."""
        encoded = self._scopes.get(scope)
        if encoded is None:
            body = b""
            if scope is not None:
                body = (_text(b"\x0a", scope.name) if scope.name else b"") + (
                    _text(b"\x12", scope.version) if scope.version else b"") + _attributes(b"\x1a", scope.attributes)
            if len(self._scopes) > 16:
                self._scopes.clear()
            encoded = self._scopes[scope] = _delimited(b"\x0a", body)
        return encoded
