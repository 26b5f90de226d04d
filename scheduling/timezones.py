"""Loading IANA time zones: the one door to zoneinfo for every send-time computation."""

from functools import lru_cache
from zoneinfo import ZoneInfo

from scheduling.zonedata import zone_cache


@zone_cache
@lru_cache(maxsize=1024)
def load_timezone(name: str) -> ZoneInfo:
    """Return the ZoneInfo for an already validated IANA name (cached)."""
    return ZoneInfo(name)
