"""Where a webhook may be sent: public addresses only, unless ``WEBHOOK_ALLOWED_NETWORKS`` names the network.

A destination's host is resolved and every address checked when it is registered; at delivery
the check is made again by the resolver of the connection itself (``CheckingResolver``), so the
address connected to is the address checked: a name that resolved to a public address at
registration and to 127.0.0.1 later (DNS rebinding) is refused. A literal IP in the URL is
checked before the request, since no resolver sees it. Redirects are not followed.
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from aiohttp.abc import AbstractResolver
from aiohttp.resolver import ThreadedResolver

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class DestinationRefused(Exception):
    """A webhook URL or address that may not be called (the reason is safe to show the admin)."""


def parse_networks(values: list[str]) -> list[Network]:
    return [ipaddress.ip_network(value, strict=False) for value in values]


def address_allowed(address: str, allowed: list[Network]) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if any(ip in network for network in allowed):
        return True
    return ip.is_global and not (ip.is_private or ip.is_loopback or ip.is_link_local or ip.is_multicast
                                 or ip.is_reserved or ip.is_unspecified)


def check_url(url: str) -> tuple[str, int]:
    """(host, port) of a URL a webhook may name: http(s), a host, no credentials; else ``DestinationRefused``."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:  # http://[zz]/: brackets around what is no IP address
        raise DestinationRefused("the webhook URL is not valid")
    if parts.scheme not in ("http", "https"):
        raise DestinationRefused("a webhook URL must be http:// or https://")
    if not host:
        raise DestinationRefused("a webhook URL must name a host")
    if literal_address(host) is None:
        try:
            host.encode("idna")
        except UnicodeError:  # an empty label or one over 63 characters: the resolver raises this, not an OSError
            raise DestinationRefused("the webhook URL's host is not a valid name")
    if parts.username or parts.password:
        raise DestinationRefused("a webhook URL may not carry credentials")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise DestinationRefused("the webhook URL's port is not valid")
    return host, port


def literal_address(host: str) -> str | None:
    try:
        return str(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return None


class CheckingResolver(AbstractResolver):
    """aiohttp's resolver, keeping only addresses a webhook may reach (none: the connection is refused)."""

    def __init__(self, allowed: list[Network]) -> None:
        self.allowed = allowed
        self._inner = ThreadedResolver()

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET):
        answers = await self._inner.resolve(host, port, family)
        kept = [answer for answer in answers if address_allowed(answer["host"], self.allowed)]
        if not kept:
            raise DestinationRefused(f"{host} resolves only to addresses webhooks may not reach "
                                     "(private, loopback or link-local; see WEBHOOK_ALLOWED_NETWORKS)")
        return kept

    async def close(self) -> None:
        await self._inner.close()


async def check_destination(url: str, allowed: list[Network]) -> None:
    """At registration: the URL's form, and every address its host resolves to now."""
    host, port = check_url(url)
    literal = literal_address(host)
    if literal is not None:
        if not address_allowed(literal, allowed):
            raise DestinationRefused(f"{literal} is a private, loopback or link-local address "
                                     "(see WEBHOOK_ALLOWED_NETWORKS)")
        return
    resolver = CheckingResolver(allowed)
    try:
        await resolver.resolve(host, port, socket.AF_UNSPEC)
    except OSError:
        raise DestinationRefused(f"{host} does not resolve")
    finally:
        await resolver.close()
