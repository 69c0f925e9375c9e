"""The ``model`` field of a multipart upload (the audio routes), resolved like any other request's.

The gateway reads one field of these bodies, ``model``, to resolve an alias and route the
request; every other byte is relayed as the client sent it, and the value is replaced in place
when it names an alias.

The body is parsed by python-multipart, the parser Starlette (and so vLLM) uses, in one pass
that is linear in the body's size: a regular expression found the part before, and one body
of repeated ``--B\\r\\ncontent-disposition:name=model\\r\\n`` lines made it backtrack in cubic
time, which froze the event loop for hours at the 4 MB body limit (issue 29). Parsing with the
engine's own parser also means both read the same parts and the same field names. A body it
cannot parse is a 400 here (the engine would refuse it too), never relayed half-understood.

The parser scans part data with ``bytes.find``, but takes a few steps of Python for each
occurrence of the delimiter, each header line, each byte of padding after a delimiter and each
``Content-Disposition`` parameter: a 4 MB body made of those cost 0.7-1.4 s. So a body may hold
the delimiter ``MAX_PARTS`` times at most (Starlette, and so the engine, takes at most 1,000
files and 1,000 fields), a part ``MAX_HEADERS`` header lines, a delimiter ``MAX_PADDING`` bytes
of padding (RFC 2046's transport padding; clients send none), a ``Content-Disposition``
``MAX_DISPOSITION_PARAMETERS`` parameters (real uploads have two or three). Beyond, a 400.
Each is counted by a scan in C before the parse, or as the parser goes. The worst body at the
4 MB limit is then 2,000 parts of 8 headers each: 0.1 s of CPU, a body of the report's shape
5 ms (tests/gateway/test_worst_case_inputs.py).
"""

from __future__ import annotations

from collections.abc import Callable

from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header

from gateway.http.errors import GatewayError
from gateway.http.multipart import boundary_of as multipart_boundary

MAX_PARTS = 2000
MAX_HEADERS = 8
MAX_PADDING = 64
MAX_DISPOSITION_PARAMETERS = 8
MODEL = b"model"


def boundary_of(content_type: str) -> bytes:
    return multipart_boundary(content_type, holds="an audio file and its fields")


def with_model(body: bytes, content_type: str, resolve: Callable[[str | None], str | None]) -> tuple[bytes, str | None]:
    """``(body, model)``: the body with its ``model`` part resolved (``resolve`` -> engine name or None: as is)."""
    span = model_span(body, boundary_of(content_type))
    if span is None:
        resolve(None)  # no model named: the engine's default (still refused while no model is known)
        return body, None
    start, end = span
    try:
        requested = body[start:end].decode()
    except UnicodeDecodeError:
        raise GatewayError(400, "'model' must be text", param="model") from None
    upstream = resolve(requested)
    if upstream is None or start == end:  # (an empty name is never an alias: resolving it is a 404)
        return body, requested
    view = memoryview(body)  # one copy of the body, not three (the slices and the sum)
    return b"".join((view[:start], upstream.encode(), view[end:])), upstream


def model_span(body: bytes, boundary: bytes) -> tuple[int, int] | None:
    """Where the ``model`` part's value lies in ``body`` (start, end); None when no part is named so.

    A 400 naming ``body`` when the body is not a complete multipart/form-data message with this
    boundary, naming ``model`` when two parts are named so.
    """
    reader = _ModelReader(body)
    try:
        parser = MultipartParser(boundary, reader.callbacks())
    except FormParserError as exc:  # a boundary longer than the parser takes
        raise GatewayError(400, f"the multipart Content-Type's boundary is refused: {exc}",
                           param="content-type") from None
    _check_delimiters(body, boundary)
    try:
        parser.write(body)  # one write of the whole body: every offset the parser reports is one of ``body``
    except FormParserError as exc:
        raise GatewayError(400, f"the multipart body could not be parsed: {exc}", param="body") from None
    if not reader.ended:
        raise GatewayError(400, "the multipart body ends before its closing boundary "
                                f"(--{boundary.decode('latin-1')}--)", param="body")
    return reader.span


def _check_delimiters(body: bytes, boundary: bytes) -> None:
    """A 400 for a body holding the delimiter more than ``MAX_PARTS`` times, or padded past ``MAX_PADDING``."""
    delimiter = b"\r\n--" + boundary
    at, seen = body.find(delimiter), 0
    while at != -1:
        seen += 1
        if seen > MAX_PARTS:
            raise GatewayError(400, f"the multipart body has more than {MAX_PARTS} parts (or holds its boundary "
                                    "inside a part)", param="body")
        after = at + len(delimiter)
        padding = body[after:after + MAX_PADDING + 1]
        if len(padding) - len(padding.lstrip(b" \t")) > MAX_PADDING:
            raise GatewayError(400, f"the multipart body pads a boundary line with more than {MAX_PADDING} "
                                    "spaces or tabs", param="body")
        at = body.find(delimiter, after)


class _ModelReader:
    """The parser's callbacks for one body: finds the ``model`` part and where its value lies."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.parts = 0
        self.ended = False
        self.span: tuple[int, int] | None = None
        self._field = bytearray()
        self._value = bytearray()
        self._disposition = b""
        self._headers = 0
        self._in_model = False
        self._start: int | None = None
        self._end: int | None = None

    def callbacks(self) -> dict:
        return {"on_part_begin": self._part_begin, "on_header_field": self._header_field,
                "on_header_value": self._header_value, "on_header_end": self._header_end,
                "on_headers_finished": self._headers_finished, "on_part_data": self._part_data,
                "on_part_end": self._part_end, "on_end": self._end_of_body}

    def _part_begin(self) -> None:
        self.parts += 1
        if self.parts > MAX_PARTS:
            raise GatewayError(400, f"the multipart body has more than {MAX_PARTS} parts", param="body")
        self._disposition = b""
        self._headers = 0
        self._in_model = False
        self._start = self._end = None

    def _header_field(self, data: bytes, start: int, end: int) -> None:
        self._field += data[start:end]

    def _header_value(self, data: bytes, start: int, end: int) -> None:
        self._value += data[start:end]

    def _header_end(self) -> None:
        self._headers += 1
        if self._headers > MAX_HEADERS:
            raise GatewayError(400, f"a multipart part has more than {MAX_HEADERS} header lines", param="body")
        if self._field.lower() == b"content-disposition":
            self._disposition = bytes(self._value)  # the last one counts, as in Starlette
        self._field.clear()
        self._value.clear()

    def _headers_finished(self) -> None:
        self._in_model = _field_name(self._disposition) == MODEL
        if self._in_model and self.span is not None:
            raise GatewayError(400, "'model' is given twice (one multipart part named 'model' at most)",
                               param="model")

    def _part_data(self, data: bytes, start: int, end: int) -> None:
        if not self._in_model:
            return
        if data is not self.body or (self._end is not None and start != self._end):
            # Cannot happen with one write of the whole body (the parser reports slices of it).
            raise RuntimeError("python-multipart reported part data outside the body it was given")
        if self._start is None:
            self._start = start
        self._end = end

    def _part_end(self) -> None:
        if self._in_model:
            # An empty value has no data callback, so no position: an empty span, never spliced.
            self.span = (self._start, self._end) if self._start is not None else (0, 0)

    def _end_of_body(self) -> None:
        self.ended = True


def _field_name(disposition: bytes) -> bytes | None:
    """The ``name`` parameter of a part's Content-Disposition (``form-data; name="model"``), read as Starlette does."""
    if MODEL not in disposition:
        return None  # the common case, decided by one scan
    if disposition.count(b";") > MAX_DISPOSITION_PARAMETERS:
        raise GatewayError(400, f"a multipart part's Content-Disposition has more than "
                                f"{MAX_DISPOSITION_PARAMETERS} parameters", param="body")
    _, options = parse_options_header(disposition)
    return options.get(b"name")
