"""What stops a web page the developer visits from driving the gateway: the Host and the body's type.

Browsers let any page send some requests to any address without asking the server first
(CORS "simple" requests: a form post, or ``fetch`` with a ``text/plain`` body), and a page
whose name the attacker re-points to 127.0.0.1 (DNS rebinding) is even same-origin with the
gateway. With keys configured neither gets anywhere: a browser sends no key it was not given.
Without keys (the loopback-only mode, every caller an admin) the gateway itself must refuse:

- the ``Host`` header of a keyless gateway must name the machine itself (``localhost``,
  ``*.localhost``, a loopback address) or one of ``ALLOWED_HOSTS``: a rebound name is refused
  with 421 (Misdirected Request) before anything runs;
- a body sent with a content type other than JSON (``text/plain``, a form) is refused with 415
  on every route except the multipart ones (audio uploads, ``/v1/files``), keys or not. That
  is also what vLLM's own FastAPI routes do (a body without a ``Content-Type`` is read as JSON,
  as there: curl without ``-H``, and no browser, sends none with a body).
"""

from __future__ import annotations

import ipaddress

from gateway.http.errors import GatewayError

BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
MULTIPART = "multipart/form-data"


def host_name(host: bytes) -> str:
    """The name part of a ``Host`` header value, lower-case (``[::1]:8000`` -> ``::1``)."""
    text = host.decode("latin-1").strip().lower()
    if text.startswith("["):
        return text[1:].partition("]")[0]
    name, _, port = text.rpartition(":")
    if name and port.isascii() and port.isdigit():
        return name
    return text


def is_local_name(name: str) -> bool:
    """A name or address every browser takes as this machine (RFC 6761: ``localhost`` and below it)."""
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class HostCheck:
    """For a keyless gateway: only requests addressed to this machine, or to ``ALLOWED_HOSTS``."""

    def __init__(self, allowed: list[str]) -> None:
        self.allowed = frozenset(name.strip().lower() for name in allowed if name.strip())

    def refusal(self, host: bytes | None) -> GatewayError | None:
        if host is None:  # HTTP/1.0 without Host: no browser sends that
            return None
        name = host_name(host)
        if is_local_name(name) or name in self.allowed:
            return None
        shown = name[:100]
        return GatewayError(421, f"this gateway has no API keys, so it answers only requests addressed to "
                                 f"localhost or a loopback address (or a name in ALLOWED_HOSTS); got Host {shown!r}",
                            param="host", code="host_not_allowed")


def media_type(content_type: bytes) -> str:
    return content_type.partition(b";")[0].strip().lower().decode("latin-1")


def is_json(media: str) -> bool:
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


def content_type_refusal(method: str, content_type: bytes | None, path: str,
                         multipart_paths: frozenset[str]) -> GatewayError | None:
    """415 for a body whose declared type the route does not take (JSON, or multipart where it is one)."""
    if content_type is None or method not in BODY_METHODS:
        return None
    media = media_type(content_type)
    if not media or is_json(media):
        return None
    if media == MULTIPART and path in multipart_paths:
        return None
    wanted = "multipart/form-data" if path in multipart_paths else "application/json"
    return GatewayError(415, f"Content-Type {media[:100]!r} is not accepted here: send {wanted}",
                        param="content-type", code="unsupported_media_type")
