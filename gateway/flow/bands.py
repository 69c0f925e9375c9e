"""Priority bands: which ones exist, which one a request runs in, and what the engine is told.

Bands are named and ordered, highest first (``FLOW_BANDS``, default
``interactive,standard,batch``); a key or team carries one (``FLOW_DEFAULT_BAND`` when it
carries none). A request may ask for a band of its own, never a higher one than its key's:

- the ``x-priority`` header, a band name;
- else the body's ``priority``, when it is a band name (a string). An integer ``priority`` is
  vLLM's own field: it asks for no band, and the gateway never relays it as sent (it would let
  a client jump the engine's queue);
- else the body's ``service_tier``, OpenAI's knob: ``flex`` asks for the lowest band,
  ``priority`` for the highest; ``auto``, ``default`` and ``scale`` ask for nothing.

Asking above the key's band is not an error: the request runs in its key's band (clients that
always say ``priority`` keep working). An unknown band name is an error that names the field.

vLLM's priority scheduler (``--scheduling-policy priority``) serves a lower ``priority`` value
first, ties by arrival, and its default is 0; a band's value is its distance from the default
band (``interactive`` -1, ``standard`` 0, ``batch`` 1), so requests that reach the engine
without a band weigh like the default band's. The gateway sends it as vLLM's
``X-Vllm-Priority`` header: vLLM 0.32 reads it before the body's field on every generating
route (chat, completions, responses, and Anthropic messages, which has no body field), it
overrides whatever ``priority`` a client put in the body, and no body is re-serialised. Under
``fcfs`` vLLM 0.32 accepts and ignores any priority (checked on the real engine), so whether to
send it is a setting (``ENGINE_SCHEDULING_POLICY``), not something the gateway can detect.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gateway.config import band_problem

PRIORITY_HEADER = "x-priority"
ENGINE_PRIORITY_HEADER = "x-vllm-priority"
BODY_FIELD = "priority"
SERVICE_TIER_FIELD = "service_tier"


class InvalidBand(ValueError):
    """A request named a band that does not exist; ``field`` says where it was named."""

    def __init__(self, field: str, value: object, names: tuple[str, ...]) -> None:
        shown = value if isinstance(value, str) and len(value) <= 40 else f"{str(value)[:40]}..."
        super().__init__(f"{field} must be one of {', '.join(names)}; got {shown!r}")
        self.field = field


@dataclass(frozen=True, slots=True)
class Band:
    name: str
    rank: int             # 0 is the highest band
    engine_priority: int  # vLLM's ``priority`` (lower is served first)

    def __str__(self) -> str:
        return self.name


class Bands:
    """The configured bands, highest first, and the default one."""

    def __init__(self, names: list[str] | tuple[str, ...], default: str) -> None:
        names = tuple(names)
        problem = band_problem(names, default)
        if problem is not None:
            raise ValueError(problem)
        base = names.index(default)
        self.all = tuple(Band(name, rank, rank - base) for rank, name in enumerate(names))
        self.names = names
        self.default = self.all[base]
        self.highest, self.lowest = self.all[0], self.all[-1]
        self._by_name = {band.name: band for band in self.all}

    def __len__(self) -> int:
        return len(self.all)

    def get(self, name: str) -> Band | None:
        return self._by_name.get(name)

    def named(self, field: str, value: object) -> Band:
        """The band called ``value``, or :class:`InvalidBand` naming ``field``."""
        band = self._by_name.get(value.strip().lower()) if isinstance(value, str) else None
        if band is None:
            raise InvalidBand(field, value, self.names)
        return band


def requested_band(bands: Bands, header: str | None, body: Mapping | None) -> Band | None:
    """The band a request asks for (None: it asks for none); :class:`InvalidBand` for an unknown name."""
    if header is not None:
        return bands.named(PRIORITY_HEADER, header)
    if body is None:
        return None
    value = body.get(BODY_FIELD)
    if isinstance(value, str):
        return bands.named(BODY_FIELD, value)
    tier = body.get(SERVICE_TIER_FIELD)
    if tier == "flex":
        return bands.lowest
    if tier == "priority":
        return bands.highest
    return None


def resolve_band(bands: Bands, allowed: Band | None, requested: Band | None) -> Band:
    """The band a request runs in: what it asked for, never above ``allowed`` (its key's or team's).

    ``allowed`` None: the default band. Asking for nothing, or for more than allowed, gives
    the allowed band.
    """
    ceiling = allowed if allowed is not None else bands.default
    if requested is None or requested.rank < ceiling.rank:
        return ceiling
    return requested


def engine_priority(band: Band, scheduling_policy: str) -> int | None:
    """vLLM's ``priority`` for a request of ``band``; None when the engines run ``fcfs`` (send none)."""
    return band.engine_priority if scheduling_policy == "priority" else None


def engine_priority_header(band: Band, scheduling_policy: str) -> tuple[str, str] | None:
    """The header that carries ``band``'s priority to vLLM (None: the engines run ``fcfs``)."""
    value = engine_priority(band, scheduling_policy)
    return None if value is None else (ENGINE_PRIORITY_HEADER, str(value))
