"""Percentiles and medians over plain lists (no numpy on the measuring path)."""

from __future__ import annotations

import statistics


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile with linear interpolation between closest ranks; 0 when empty."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def median_or_none(values: list[float | None]) -> float | None:
    """The median of the values that are present, or None when none are."""
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator, or None when either is missing or the denominator is 0."""
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def difference(minuend: float | None, subtrahend: float | None) -> float | None:
    """minuend - subtrahend, or None when either is missing."""
    if minuend is None or subtrahend is None:
        return None
    return minuend - subtrahend
