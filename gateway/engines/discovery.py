"""Which engines there are: a fixed list from the settings, or every address a DNS name resolves to.

- ``VLLM_BASE_URL``: one engine (the gateway's original setting, unchanged).
- ``VLLM_BASE_URLS``: several, comma-separated; each item ``URL`` or ``URL|KEY`` (that engine's
  own API key; without one, ``VLLM_API_KEY``). It replaces ``VLLM_BASE_URL``.
- ``VLLM_DNS_URL`` (``http://NAME:PORT``): every address ``NAME`` resolves to is an engine,
  ``http://<address>:PORT``, re-resolved every ``VLLM_DNS_REFRESH_SECONDS``. A Kubernetes
  headless Service resolves to its ready pods' IPs (docs/fleet.md). A failed resolution keeps
  the engines known so far (a DNS hiccup must not empty the fleet); an answer with no address
  does empty it. It replaces both lists.
- ``VLLM_DNS_NETWORKS`` (CIDRs): the networks a resolved address must lie in. The gateway sends
  ``VLLM_API_KEY`` to every engine it routes to, so whoever can change what the name resolves
  to (a poisoned resolver, a misconfigured record) would otherwise receive the key and the
  traffic. An address outside is refused and logged when the refused set changes; an answer
  of names rather than addresses cannot be checked and is refused too. Empty: any address.

The resolver is a parameter, so tests give a stub.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from gateway.config import Settings, is_http_url

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
        if not is_http_url(url):
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

    def __init__(self, url: str, *, api_key: str | None, resolver: Resolver = system_resolver,
                 networks: list[str] = ()) -> None:
        if not is_http_url(url):
            raise ValueError(f"VLLM_DNS_URL: {url!r} must look like http://NAME:PORT")
        parts = urlsplit(url)
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.path = parts.path.rstrip("/")
        self.api_key = api_key
        self.resolver = resolver
        self.networks = [ipaddress.ip_network(network, strict=False) for network in networks]
        self.refused: list[str] = []  # the addresses of the last answer outside VLLM_DNS_NETWORKS
        self.last_error: str | None = None

    @classmethod
    def from_settings(cls, settings: Settings, resolver: Resolver = system_resolver) -> DnsDiscovery | None:
        if not settings.vllm_dns_url:
            return None
        return cls(settings.vllm_dns_url, api_key=_default_key(settings), resolver=resolver,
                   networks=settings.vllm_dns_networks)

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
        allowed = [address for address in addresses if self._allowed(address)]
        refused = sorted(set(addresses) - set(allowed))
        if refused != self.refused and refused:
            log.warning("engine discovery refused addresses outside VLLM_DNS_NETWORKS",
                        extra={"host": self.host, "refused": refused})
        self.refused = refused
        if refused and not allowed:  # what /health and a 503 say while the fleet is empty
            self.last_error = f"every address {self.host} resolves to is outside VLLM_DNS_NETWORKS"
        urls = sorted({self._url(address) for address in allowed})
        return [(url, self.api_key) for url in urls]

    def _allowed(self, address: str) -> bool:
        if not self.networks:
            return True
        try:
            ip = ipaddress.ip_address(address.split("%", 1)[0])
        except ValueError:  # a name: nothing to check it against
            return False
        return any(ip in network for network in self.networks)

    def _url(self, address: str) -> str:
        host = address.split("%", 1)[0]  # an IPv6 zone index is meaningless in a URL
        try:
            if isinstance(ipaddress.ip_address(host), ipaddress.IPv6Address):
                host = f"[{host}]"
        except ValueError:  # a name (a stub resolver may answer names)
            pass
        return f"{self.scheme}://{host}:{self.port}{self.path}"
