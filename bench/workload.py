"""What a workload is (a name, what it measures, its sizes), and the sizes of one run.

Each workload's sizes are a frozen dataclass, one instance per size name; a field's name
is also its `--set` key and its key in results.json's "sizes", which bench/report.py reads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

# "full" is what `make bench` runs; "small" checks the harness, or a change, in minutes.
SIZE_NAMES = ("small", "full")


@dataclass(frozen=True)
class Workload:
    """One workload: `measure(harness, size=...)` returns what results.json keeps under `name`."""

    name: str
    measure: Callable[..., dict]
    # The workload's size dataclass for each of SIZE_NAMES.
    sizes: Mapping[str, Any]
    # Repeat the whole workload when PostgreSQL restarts under it (Harness.attempt), for a
    # workload that builds its table once and measures several steps on it: a step cannot
    # be repeated alone, the ones before it changed the rows it reads (claimed, pruned, moved).
    repeat_whole: bool = False


def sizes_chosen(
    workloads: Mapping[str, Workload], *, size: str, overrides: Mapping[str, int]
) -> dict[str, Any]:
    """Each workload's sizes at `size`, with each override (`--set key=n`) in every workload that has the key."""
    chosen = {name: workload.sizes[size] for name, workload in workloads.items()}
    for key, value in overrides.items():
        chosen = {
            name: replace(sizes, **{key: value}) if key in {f.name for f in fields(sizes)} else sizes
            for name, sizes in chosen.items()
        }
    return chosen


def sizes_flat(chosen: Mapping[str, Any]) -> dict[str, int]:
    """Every workload's sizes in one dict, as results.json keeps them for the report.

    A size that several workloads have (`runs`; the burst's and the import's in `profiles`)
    must have one value there: the report prints one.
    """
    flat: dict[str, int] = {}
    for name, sizes in chosen.items():
        for key, value in asdict(sizes).items():
            if flat.setdefault(key, value) != value:
                raise ValueError(f"size {key} is {flat[key]} in one workload and {value} in {name}")
    return flat
