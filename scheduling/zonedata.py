"""Which IANA time zone database this process computes with, and following it when it is updated.

zoneinfo reads a zone from the first directory of zoneinfo.TZPATH that holds
it (the system's /usr/share/zoneinfo, or PYTHONTZPATH), else from the `tzdata`
package; it caches every zone it loaded, and so do the lru_caches of this
project registered with `zone_cache`. A process that lives for months would
keep computing with the rules it loaded at start, whatever apt or pip installs
meanwhile: `zone_data_refresh` looks at the database's version file (a stat,
at most once a second) and, when the version changed, drops every cache, so
what is computed next follows the rules now in force. The PENDING events
computed before are moved by scheduling.services.zone_rules.

It is called at two seams and nowhere else, so that no service, validator or
page has to remember to: at the top of every web request
(scheduling.middleware.ZoneDataMiddleware) and at the top of every turn of a
long-running loop (the scheduler's and the worker's). A one-off command
(import_users, follow_zone_data) reads the data in force when it starts.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
import zoneinfo
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Protocol, TypeVar

logger = logging.getLogger(__name__)

# The first line of tzdata.zi, the one-file form of the database shipped by
# Debian's tzdata, by most other distributions and by the tzdata package.
_VERSION_LINE = re.compile(r"#\s*version\s+(\S+)")
# How long a look at the version file is trusted: callers on every API write
# and every scheduler turn then cost a clock reading, and a stat a second.
LOOK_EVERY = 1.0


@dataclass(frozen=True)
class ZoneData:
    """A time zone database: its IANA version ("2025b", None if it does not say) and where it lives."""

    version: str | None
    path: str


_caches: list[Callable[[], None]] = []
_lock = threading.Lock()
_current: ZoneData | None = None
# (path, inode, mtime, size) of the version file when it was last read.
_signature: tuple | None = None
_looked_at = float("-inf")


class _Clearable(Protocol):
    def cache_clear(self) -> None: ...


Cached = TypeVar("Cached", bound=_Clearable)


def zone_cache(cached: Cached) -> Cached:
    """Register an lru_cache'd function whose results depend on the zone rules: dropped when they change."""
    _caches.append(cached.cache_clear)
    return cached


def _version_file() -> Path:
    # The first TZPATH directory that exists is where zoneinfo finds every zone
    # it has; the tzdata package only fills in zones missing there.
    for directory in zoneinfo.TZPATH:
        if os.path.isdir(directory):
            for name in ("tzdata.zi", "+VERSION"):
                candidate = Path(directory, name)
                if candidate.is_file():
                    return candidate
            return Path(directory, "tzdata.zi")  # zones without a version: reported as unknown
    return Path(str(resources.files("tzdata.zoneinfo").joinpath("tzdata.zi")))


def _read(path: Path) -> ZoneData:
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            first = file.readline()
    except OSError:
        return ZoneData(version=None, path=str(path.parent))
    if path.name == "+VERSION":  # the whole file is the version (macOS, some builds of zic)
        return ZoneData(version=first.strip() or None, path=str(path.parent))
    match = _VERSION_LINE.match(first)
    return ZoneData(version=match.group(1) if match else None, path=str(path.parent))


def _stat(path: Path) -> tuple | None:
    try:
        status = path.stat()
    except OSError:
        return None
    return (str(path), status.st_ino, status.st_mtime_ns, status.st_size)


def zone_data() -> ZoneData:
    """The time zone database this process computes with."""
    if _current is None:
        zone_data_refresh()
    assert _current is not None  # the refresh reads the data whenever none was read
    return _current


def zone_data_version() -> str:
    """The IANA version of the time zone database this process computes with ("unknown" if it does not say)."""
    return zone_data().version or "unknown"


def zone_data_refresh() -> bool:
    """Drop every cached zone if the time zone database changed since it was last read; say whether it did.

    A look at most every LOOK_EVERY seconds, one stat of the version file; the
    file is read only when the stat differs (an upgrade replaces it).
    """
    global _current, _signature, _looked_at
    now = time.monotonic()
    # A clock seen going back (a test's frozen time) is a reason to look, not to wait.
    if _current is not None and 0 <= now - _looked_at < LOOK_EVERY:
        return False
    with _lock:
        _looked_at = now
        path = _version_file()
        signature = _stat(path)
        if _current is not None and signature == _signature:
            return False
        found = _read(path)
        _signature = signature
        previous, _current = _current, found
        if previous is None or previous == found:
            return False
        zoneinfo.ZoneInfo.clear_cache()
        for clear in _caches:
            clear()
    logger.warning(
        "Time zone data changed from %s to %s: cached zones dropped, new computations follow the new rules",
        previous.version or "unknown",
        found.version or "unknown",
        extra={"zone_data_path": found.path},
    )
    return True
