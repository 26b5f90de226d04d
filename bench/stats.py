"""The statistics the workloads report: medians, percentiles, the steady delivery rate."""

from __future__ import annotations

import statistics
from collections.abc import Iterable


def median(values: Iterable[float | None]) -> float | None:
    """The median of the values that are not None; None when there are none."""
    present = [value for value in values if value is not None]
    return statistics.median(present) if present else None


def percentile(sorted_values: list[float], *, percent: float) -> float | None:
    """The `percent` percentile of already sorted values, interpolated linearly between neighbours."""
    if not sorted_values:
        return None
    k = (len(sorted_values) - 1) * percent / 100
    lo = int(k)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)


def steady_rate(counts: dict) -> float | None:
    """Deliveries/s between the first and the last arrival (process start-up excluded)."""
    if counts["unique"] < 2 or counts["last_arrival"] <= counts["first_arrival"]:
        return None
    return (counts["unique"] - 1) / (counts["last_arrival"] - counts["first_arrival"])
