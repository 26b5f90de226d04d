"""The web side's seam for following an update of the time zone database."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from scheduling.zonedata import zone_data_refresh


class ZoneDataMiddleware:
    """Each request computes with the zone rules in force: one look at the database's version first.

    One of the two places that call zone_data_refresh (the other is each turn
    of the scheduler's and the worker's loop), so that no service, validator
    or page has to remember to: a zone the database gained is accepted at
    once, and a date is checked by the rules the events are computed with.
    The look costs a clock reading, and a stat at most once a second.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        zone_data_refresh()
        return self.get_response(request)
