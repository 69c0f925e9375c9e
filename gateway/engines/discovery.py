"""Which engines there are: a fixed list from the settings, or every address a DNS name resolves to.

- ``VLLM_BASE_URL``: one engine (the gateway's original setting, unchanged).
- ``VLLM_BASE_URLS``: several, comma-separated; each item ``URL`` or ``URL|KEY`` (that engine's
  own API key; without one, ``VLLM_API_KEY``). It replaces ``VLLM_BASE_URL``.
- ``VLLM_DNS_URL`` (``http://NAME:PORT``): every address ``NAME`` resolves to is an engine,
  ``http://<address>:PORT``, re-resolved every ``VLLM_DNS_REFRESH_SECONDS``. A Kubernetes
  headless Service resolves to its ready pods' IPs (docs/fleet.md). A failed resolution keeps
  the engines known so far (a DNS hiccup must not empty the fleet); an answer with no address
  does empty it. It replaces both lists.

The resolver is a parameter, so tests give a stub.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from gateway.config import Settings

log = logging.getLogger("gateway.engine")

Member = tuple[str, str | None]  # (base URL, API key)
Resolver = Callable[[str, int], Awaitable[list[str]]]


def _default_key(settings: Settings) -> str | None:
    key = settings.vllm_api_key
    return key.get_secret_value() or None if key is not None else None


def parse_url_list(items: list[str], default_key: str | None) -> list[Member]:
    """``URL`` / ``URL|KEY`` items -> members (a URL given twice counts once: the first wins)."""
    members: list[Member] = []
    seen: set[str] = set()
    for item in items:
        url, _, key = item.partition("|")
        url = url.strip().rstrip("/")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"VLLM_BASE_URLS: {url!r} is not an http(s) URL")
        if url not in seen:
            seen.add(url)
            members.append((url, key.strip() or default_key))
    return members


def static_members(settings: Settings) -> list[Member]:
    """The engines named by the settings (none when they are found by DNS)."""
    if settings.vllm_dns_url:
        return []
    if settings.vllm_base_urls:
        return parse_url_list(settings.vllm_base_urls, _default_key(settings))
    return [(settings.vllm_base_url, _default_key(settings))]


async def system_resolver(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (A and AAAA records), through the system resolver."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [info[4][0] for info in infos]


class DnsDiscovery:
    """The engines behind one DNS name: one per address."""

    def __init__(self, url: str, *, api_key: str | None, resolver: Resolver = system_resolver) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"VLLM_DNS_URL: {url!r} must look like http://NAME:PORT")
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.path = parts.path.rstrip("/")
        self.api_key = api_key
        self.resolver = resolver
        self.last_error: str | None = None

    @classmethod
    def from_settings(cls, settings: Settings, resolver: Resolver = system_resolver) -> DnsDiscovery | None:
        if not settings.vllm_dns_url:
            return None
        return cls(settings.vllm_dns_url, api_key=_default_key(settings), resolver=resolver)

    async def members(self) -> list[Member] | None:
        """The engines now, in a stable order; None when the name could not be resolved."""
        try:
            addresses = await self.resolver(self.host, self.port)
        except (TimeoutError, OSError) as exc:
            self.last_error = f"could not resolve {self.host}: {exc}"
            log.warning("engine discovery failed; keeping the engines known so far",
                        extra={"host": self.host, "reason": str(exc)})
            return None
        self.last_error = None
        urls = sorted({self._url(address) for address in addresses})
        return [(url, self.api_key) for url in urls]

    def _url(self, address: str) -> str:
        host = address.split("%", 1)[0]  # an IPv6 zone index is meaningless in a URL
        try:
            if isinstance(ipaddress.ip_address(host), ipaddress.IPv6Address):
                host = f"[{host}]"
        except ValueError:  # a name (a stub resolver may answer names)
            pass
        return f"{self.scheme}://{host}:{self.port}{self.path}"
