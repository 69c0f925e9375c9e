"""Reading a ``multipart/form-data`` upload as it arrives: the fields in memory, the file part to storage.

python-multipart (the parser Starlette and so vLLM use) is fed each chunk of the request body
and calls back per part; the parse is linear in the body's size and the file part's bytes go
straight to the ``Upload`` (``files.service``), so a big file never sits in memory. A body
may hold ``MAX_PARTS`` parts of ``MAX_HEADERS`` header lines at most, and a field
``MAX_FIELD_BYTES``: an upload has three or four parts, and anything beyond is refused before
it costs more than a few steps.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header

from gateway.files.service import Upload
from gateway.http.errors import GatewayError
from gateway.http.inputs import NUL
from gateway.http.multipart import boundary_of as multipart_boundary

MAX_PARTS = 16
MAX_HEADERS = 8
MAX_FIELD_BYTES = 1024
# What an upload's body may hold beyond its file (boundaries, part headers, the fields): the
# request-body limit of the upload route is FILES_MAX_BYTES plus this, the file itself exactly FILES_MAX_BYTES.
MULTIPART_FRAMING_BYTES = 64 * 1024


def boundary_of(content_type: str) -> bytes:
    return multipart_boundary(content_type, holds="the file and its purpose")


@dataclass
class Form:
    fields: dict[str, str] = field(default_factory=dict)
    filename: str | None = None  # the file part's, once one was seen


class _Parse:
    """The callbacks: a part is a field (kept, bounded) or the file (its data queued for the upload)."""

    def __init__(self) -> None:
        self.form = Form()
        self.file_data: list[bytes] = []
        self.parts = 0
        self.headers = 0
        self._header_name = b""
        self._header_value = b""
        self._name: str | None = None
        self._is_file = False
        self._value = bytearray()
        self.ended = False

    def end(self) -> None:
        self.ended = True

    def callbacks(self) -> dict:
        return {"on_end": self.end, "on_part_begin": self.part_begin, "on_part_data": self.part_data,
                "on_part_end": self.part_end,
                "on_header_field": self.header_field, "on_header_value": self.header_value,
                "on_header_end": self.header_end}

    def part_begin(self) -> None:
        self.parts += 1
        if self.parts > MAX_PARTS:
            raise GatewayError(400, f"the upload has more than {MAX_PARTS} parts", param="file")
        self.headers = 0
        self._name, self._is_file, self._value = None, False, bytearray()

    def header_field(self, data: bytes, start: int, end: int) -> None:
        self._header_name += data[start:end]

    def header_value(self, data: bytes, start: int, end: int) -> None:
        self._header_value += data[start:end]
        if len(self._header_value) > MAX_FIELD_BYTES:
            raise GatewayError(400, "a multipart header is too long", param="file")

    def header_end(self) -> None:
        self.headers += 1
        if self.headers > MAX_HEADERS:
            raise GatewayError(400, f"a multipart part has more than {MAX_HEADERS} headers", param="file")
        if self._header_name.lower() == b"content-disposition":
            _, options = parse_options_header(self._header_value)
            name = options.get(b"name")
            self._name = name.decode("utf-8", "replace") if name is not None else None
            filename = options.get(b"filename")
            if filename is not None and self._name == "file":
                self._is_file = True
                if self.form.filename is not None:
                    raise GatewayError(400, "the upload has more than one file", param="file")
                # (a NUL becomes U+FFFD like undecodable bytes: gateway.http.inputs)
                self.form.filename = filename.decode("utf-8", "replace").replace(NUL, "\ufffd") \
                    .replace("\\", "/").rsplit("/", 1)[-1]
        self._header_name, self._header_value = b"", b""

    def part_data(self, data: bytes, start: int, end: int) -> None:
        if self._is_file:
            self.file_data.append(data[start:end])
            return
        self._value += data[start:end]
        if len(self._value) > MAX_FIELD_BYTES:
            raise GatewayError(400, f"the field {self._name!r} is too long", param=self._name)

    def part_end(self) -> None:
        if not self._is_file and self._name is not None:
            self.form.fields[self._name] = self._value.decode("utf-8", "replace")


async def read_form(body: AsyncIterator[bytes], boundary: bytes, upload: Upload) -> Form:
    """Feed ``body`` to the parser; the file part's bytes go to ``upload`` as they come."""
    parse = _Parse()
    try:
        parser = MultipartParser(boundary, parse.callbacks())
    except (FormParserError, ValueError):
        raise GatewayError(400, "the multipart boundary is not valid", param="content-type")
    async for chunk in body:
        try:
            parser.write(chunk)
        except FormParserError:
            raise GatewayError(400, "the multipart body could not be parsed", param="file")
        for data in parse.file_data:
            await upload.write(data)
        parse.file_data.clear()
    try:
        parser.finalize()
    except FormParserError:
        parse.ended = False
    if not parse.ended:
        raise GatewayError(400, "the multipart body ended early (no closing boundary)", param="file")
    for data in parse.file_data:
        await upload.write(data)
    return parse.form
