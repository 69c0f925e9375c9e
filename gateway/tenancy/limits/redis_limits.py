"""The limiter on Redis: one Lua script call checks and reserves for every scope of a request, atomically.

Never a local pre-check against a shared counter (LiteLLM's "100 RPM across 4 instances
lets 400 through"): the read and the write happen inside one script, which Redis runs alone,
so N replicas asking at once for the last slot get one yes and N-1 noes. ``admit.lua`` checks
and reserves; ``adjust.lua`` extends a reservation (a stream that needs more tokens than it
reserved, as far as the budgets allow) or settles it (the engine's real usage replaces the
reservation, the concurrency lease is released). ``calendar.lua`` gives both the budget
periods. The scripts read Redis's clock, so replicas whose clocks differ still agree.

Keys: ``gw:{<tag>}:<scope>:<counter>``; the tag (the team's id, else the key's) puts every
counter one request touches in one slot, as Redis Cluster requires of a script.
"""

from __future__ import annotations

import itertools
import secrets
from importlib.resources import files

from gateway.tenancy.limits.model import (
    PERIOD_CODES,
    REASONS,
    WINDOW_SECONDS,
    Demand,
    RateInfo,
    RateLimited,
    Reservation,
)
from gateway.tenancy.limits.resp import RedisClient, RedisReplyError


def _script(name: str) -> str:
    package = files("gateway.tenancy.limits")
    return package.joinpath("calendar.lua").read_text() + "\n" + package.joinpath(name).read_text()


ADMIT = _script("admit.lua")
ADJUST = _script("adjust.lua")
_EXTEND, _SETTLE, _SETTLE_NOT_RUN = 1, 2, 3
_ADMIT_OWN, _ADJUST_OWN = 3, 4  # a request's own arguments: (id, tokens, min tokens), (id, mode, tokens, second)


_PACKED_MAX = 10_000


class _Packed:
    """A demand's commands as far as they are the key's, in RESP form, packed once per key: found by its
    scopes' identity.

    ``demand_for`` gives every request of a key the same scopes tuple (built once per key), so the
    lookup is one dict get on an int; scopes built otherwise are packed again (the same bytes).
    """

    def __init__(self, client: RedisClient, tail: tuple[int, ...]) -> None:
        self._client = client
        self._tail = tail  # the arguments every call has between its own and the limits (the lease, the window)
        self._cache: dict[int, tuple[tuple, str, bytes, bytes, bytes]] = {}

    def __call__(self, demand: Demand) -> tuple[bytes, bytes, bytes]:
        """(``admit.lua``'s ``EVALSHA`` up to its keys, ``adjust.lua``'s the same, what both end with:
        the lease, the window and the limits), the request's own arguments going between."""
        scopes = demand.scopes
        packed = self._cache.get(id(scopes))
        if packed is None or packed[0] is not scopes or packed[1] != demand.tag:
            keys = _keys(demand)
            if len(self._cache) >= _PACKED_MAX:
                self._cache.clear()
            limits = _limit_args(demand)
            count = 1 + len(keys) + len(self._tail) + len(limits)  # (the key count, the keys, tail and limits)
            keys_packed = _pack_args((len(keys), *keys))
            # (holding ``scopes`` keeps its id from being reused while it is here)
            packed = self._cache[id(scopes)] = (
                scopes, demand.tag, self._client.evalsha_head(ADMIT, count + _ADMIT_OWN) + keys_packed,
                self._client.evalsha_head(ADJUST, count + _ADJUST_OWN) + keys_packed,
                _pack_args((*self._tail, *limits)))
        return packed[2], packed[3], packed[4]


class _ReservationIds:
    """Unique reservation ids without a system call each: a random prefix per process, then a counter."""

    def __init__(self) -> None:
        self.prefix = secrets.token_hex(6)
        self.counter = itertools.count()

    def next(self) -> str:
        return f"{self.prefix}{next(self.counter):x}"


def _pack_args(args: tuple) -> bytes:
    """``args`` as RESP bulk strings without the array header: a fragment of a longer command."""
    parts = []
    for arg in args:
        data = b"%d" % arg if isinstance(arg, int) else arg.encode() if isinstance(arg, str) else arg
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


def _keys(demand: Demand) -> list[str]:
    keys = []
    for scope in demand.scopes:
        base = f"gw:{{{demand.tag}}}:{scope.name}"
        keys += [base + ":rpm", base + ":tpm", base + ":conc", base + ":budget"]
    return keys


def _limit_args(demand: Demand) -> list[int]:
    args: list[int] = []
    for scope in demand.scopes:
        limits = scope.limits
        args += [_or_none(limits.rpm), _or_none(limits.tpm), _or_none(limits.max_concurrency),
                 _or_none(limits.budget_tokens), PERIOD_CODES[limits.budget_period]]
    return args


def _or_none(value: int | None) -> int:
    return -1 if value is None else value


def _seconds(value: int) -> float | None:
    return None if value < 0 else value / 1000


def _rate(reply: list) -> RateInfo:
    """The reply's figures (limit, remaining, reset ms per kind; limit -1: none), built positionally:
    once per request of a limited key, so written out rather than looped."""
    limit, remaining, reset = reply[6], reply[7], reply[8]
    requests = (None, None, None) if limit < 0 else (limit, remaining if remaining > 0 else 0,
                                                     None if reset < 0 else reset / 1000)
    limit, remaining, reset = reply[9], reply[10], reply[11]
    tokens = (None, None, None) if limit < 0 else (limit, remaining if remaining > 0 else 0,
                                                   None if reset < 0 else reset / 1000)
    limit, remaining, reset = reply[12], reply[13], reply[14]
    if limit < 0:
        return RateInfo(*requests, *tokens)
    return RateInfo(*requests, *tokens, limit, remaining if remaining > 0 else 0, None if reset < 0 else reset / 1000)


class RedisLimits:
    def __init__(self, client: RedisClient, *, lease_seconds: float = 300.0) -> None:
        self.client = client
        self.lease_ms = int(lease_seconds * 1000)
        # (the lease and the window: the arguments every call ends with before the limits, packed once per key)
        self._packed = _Packed(client, (self.lease_ms, WINDOW_SECONDS))
        self._ids = _ReservationIds()
        client.preload += [ADMIT, ADJUST]  # on every new connection: settle sends without a reply to retry on

    async def admit(self, demand: Demand) -> tuple[Reservation, list[int]]:
        """The reservation and, per scope, its budget's use after it (-1: no budget), or ``RateLimited``."""
        reservation_id = self._ids.next()
        start, _, end = self._packed(demand)
        # (reservation id, tokens, min tokens, then lease, window, limits): ARGV as admit.lua reads it
        packed_id, tokens, least = reservation_id.encode(), b"%d" % demand.tokens, b"%d" % demand.min_tokens
        # (one formatting of the whole command: its bulk strings written in place)
        command = b"%s$%d\r\n%s\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n%s" % (
            start, len(packed_id), packed_id, len(tokens), tokens, len(least), least, end)
        client = self.client
        sent = client.submit(command)  # (its reply's future awaited here: no coroutine of the client's per request)
        try:
            reply = await (sent if sent is not None else client.send(command))
        except RedisReplyError as exc:
            reply = await client.reloaded(exc, ADMIT, command)
        rate = _rate(reply)  # type: ignore[arg-type]
        if reply[0] != 1:  # type: ignore[index]
            scope = demand.scopes[reply[4] - 1].name  # type: ignore[index]
            raise RateLimited(REASONS[reply[3]], scope, _seconds(reply[5]), rate)  # type: ignore[index]
        reservation = Reservation(reservation_id, demand, reply[1], reply[2], "redis", rate)  # type: ignore[index]
        return reservation, reply[15:]  # type: ignore[index]  # (a slice: a list of its own already)

    async def extend(self, reservation: Reservation, tokens: int) -> int:
        reply = await self._adjust(reservation, _EXTEND, tokens)
        granted = int(reply[0])
        reservation.granted += granted
        return granted

    def settle(self, reservation: Reservation, used: int, *, ran: bool = True) -> None:
        """Sent without waiting for the reply: nothing depends on it, and a request's end should not wait on Redis.

        The script is loaded on every new connection (``preload``); a server that lost it without a
        reconnection (``SCRIPT FLUSH``) makes the settle fail, counted in ``failed_unawaited``.
        """
        self.client.send_nowait(self._adjust_command(reservation, _SETTLE if ran else _SETTLE_NOT_RUN,
                                                     used - reservation.granted))

    def renew(self, reservation: Reservation) -> None:
        """Push its concurrency lease's deadline to a full lease from now (an extend of no tokens: adjust.lua
        renews the lease of every extend); sent without waiting for the reply, as ``settle``."""
        self.client.send_nowait(self._adjust_command(reservation, _EXTEND, 0))

    async def _adjust(self, reservation: Reservation, mode: int, tokens: int) -> list:
        command = self._adjust_command(reservation, mode, tokens)
        try:
            return await self.client.send(command)  # type: ignore[return-value]
        except RedisReplyError as exc:
            return await self.client.reloaded(exc, ADJUST, command)  # type: ignore[return-value]

    def _adjust_command(self, reservation: Reservation, mode: int, tokens: int) -> bytes:
        _, start, end = self._packed(reservation.demand)
        # (reservation id, mode, tokens, second, then lease, window, limits): ARGV as adjust.lua reads it
        reservation_id, amount, second = reservation.id.encode(), b"%d" % tokens, b"%d" % reservation.second
        return b"%s$%d\r\n%s\r\n$1\r\n%d\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n%s" % (
            start, len(reservation_id), reservation_id, mode, len(amount), amount, len(second), second, end)
