"""The boundary of a multipart/form-data body: the one check of the routes that take one (file
uploads, the engine API's audio routes), each saying what its form holds."""

from __future__ import annotations

import logging
import re

from gateway.http.errors import GatewayError

_BOUNDARY = re.compile(r'boundary="?([^";,]+)"?', re.I)

# python-multipart logs a warning for each body it refuses, without the request's id; the 400 says
# it to the client and the access log records the request.
logging.getLogger("python_multipart").setLevel(logging.ERROR)


def boundary_of(content_type: str, *, holds: str) -> bytes:
    """The boundary of ``content_type``; a 400 naming ``content-type`` when it is not
    multipart/form-data or has none (``holds``: what the route's form carries, for the message)."""
    if not content_type.lower().startswith("multipart/form-data"):
        raise GatewayError(400, f"this route takes a multipart/form-data body ({holds})", param="content-type")
    found = _BOUNDARY.search(content_type)
    if found is None:
        raise GatewayError(400, "the multipart Content-Type has no boundary", param="content-type")
    return found.group(1).encode("latin-1")
