"""The ``model`` field of a multipart upload (the audio routes), resolved like any other request's.

Audio uploads are large and the gateway reads nothing else in them, so the body is not
parsed: the one ``model`` part is found by its ``Content-Disposition`` header and its value
replaced when it names an alias; every other byte is relayed as the client sent it.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from gateway.http.errors import GatewayError

_BOUNDARY = re.compile(r'boundary="?([^";,]+)"?', re.I)


def boundary_of(content_type: str) -> bytes:
    """The multipart boundary of ``content_type``; a 400 when it is not multipart/form-data."""
    if not content_type.lower().startswith("multipart/form-data"):
        raise GatewayError(400, "this route takes a multipart/form-data body (an audio file and its fields)",
                           param="content-type")
    found = _BOUNDARY.search(content_type)
    if found is None:
        raise GatewayError(400, "the multipart Content-Type has no boundary", param="content-type")
    return found.group(1).encode("latin-1")


def with_model(body: bytes, content_type: str, resolve: Callable[[str | None], str | None]) -> tuple[bytes, str | None]:
    """``(body, model)``: the body with its ``model`` part resolved (``resolve`` -> engine name or None: as is)."""
    boundary = boundary_of(content_type)
    part = re.compile(
        # the part's header lines (never past the blank line that ends them), then its value
        rb"(--" + re.escape(boundary) + rb"\r\n(?:[^\r\n]+\r\n)*?content-disposition:[^\r\n]*"
        rb"\bname=\"?model\"?(?:;[^\r\n]*)?\r\n(?:[^\r\n]+\r\n)*?\r\n)(.*?)(\r\n--" + re.escape(boundary) + rb")",
        re.I | re.S)
    found = part.search(body)
    if found is None:
        resolve(None)  # no model named: the engine's default (still refused while no model is known)
        return body, None
    try:
        requested = found.group(2).decode()
    except UnicodeDecodeError:
        raise GatewayError(400, "'model' must be text", param="model") from None
    upstream = resolve(requested)
    if upstream is None:
        return body, requested
    return body[:found.start(2)] + upstream.encode() + body[found.end(2):], upstream
