"""Whether a request's sampling repeats itself: the one rule every protocol's continuation reads."""

from __future__ import annotations


def number(value: object) -> bool:
    """A JSON number (a bool is not one, although Python counts it as an int)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def greedy_or_seeded(payload: dict) -> bool:
    """``temperature`` 0, or a ``seed``: running the request again yields the same tokens."""
    seed = payload.get("seed")
    if isinstance(seed, int) and not isinstance(seed, bool):
        return True
    temperature = payload.get("temperature")
    return number(temperature) and temperature == 0
