"""The upcoming page: what will be sent in the next days, who, where, when and in which words, or why not.

A page of delivery.upcoming.selectors.upcoming_list, grouped by the date celebrated; filters by
destination, label and type; times in the zone they are kept in (the recipient's for a message,
the destination's for a digest), UTC on hover. The same read serves the destination's and the
recipient's pages (upcoming_placements_html, digests_html).
"""

from __future__ import annotations

from collections.abc import Iterable

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from console import widgets
from delivery.models import Destination
from delivery.upcoming.selectors import (
    UPCOMING_DAYS_DEFAULT,
    UPCOMING_DAYS_MAX,
    UpcomingDigest,
    UpcomingFilterError,
    UpcomingOccurrence,
    upcoming_list,
)
from scheduling.event_types import EventType
from scheduling.labels import clean_labels

# Reading who is greeted where names people and destinations: both views are needed.
VIEW_PERMISSIONS = ("delivery.view_destination", "users.view_user")
DAY_CHOICES = (1, 7, 14, 30, 90, 366)


def upcoming_view(request, *, site: admin.AdminSite):
    if not request.user.has_perms(VIEW_PERMISSIONS):
        raise PermissionDenied
    errors = []
    days = _int(request.GET.get("days")) or UPCOMING_DAYS_DEFAULT
    if not 1 <= days <= UPCOMING_DAYS_MAX:
        errors.append(f"Days: from 1 to {UPCOMING_DAYS_MAX}; showing {UPCOMING_DAYS_DEFAULT}.")
        days = UPCOMING_DAYS_DEFAULT
    destination_id = _int(request.GET.get("destination"))
    event_type = request.GET.get("type") or None
    if event_type is not None and event_type not in EventType.values:
        errors.append("Type: not an event type; showing every type.")
        event_type = None
    label = _label(request.GET.get("label"), errors)
    try:
        page = upcoming_list(
            now=timezone.now(),
            days=days,
            destination_id=destination_id,
            label=label,
            event_type=event_type,
            cursor=request.GET.get("cursor") or None,
        )
    except UpcomingFilterError as exc:
        errors.append(f"{exc.field.capitalize()}: {exc}")
        page = upcoming_list(now=timezone.now(), days=days, label=label, event_type=event_type)
        destination_id = None
    query = request.GET.copy()
    query.pop("cursor", None)
    if page.next_cursor:
        query["cursor"] = page.next_cursor
    context = {
        **site.each_context(request),
        "title": "Upcoming",
        "page": page,
        "days_groups": _by_date(page.occurrences),
        "days": days,
        "day_choices": sorted({*DAY_CHOICES, days}),
        "destinations": list(Destination.objects.order_by("name").values_list("pk", "name")),
        "destination_id": destination_id,
        "event_types": EventType.choices,
        "event_type": event_type or "",
        "label": label or "",
        "errors": errors,
        "next_query": query.urlencode() if page.next_cursor else "",
        "first_page": not request.GET.get("cursor"),
    }
    return TemplateResponse(request, "admin/upcoming.html", context)


def _label(raw: str | None, errors: list[str]) -> str | None:
    if not raw or not raw.strip():
        return None
    try:
        (label,) = clean_labels([raw])
    except Exception:  # clean_labels's ValidationError, or a value that splits into more than one
        errors.append("Label: a label such as team:platform (lowercase, no spaces); showing every label.")
        return None
    return label


def _int(raw: str | None) -> int | None:
    return int(raw) if raw and raw.isdigit() else None


def _by_date(occurrences: list[UpcomingOccurrence]) -> list[tuple[object, list[UpcomingOccurrence]]]:
    """The occurrences under their date, each date once, in the order of their first send time."""
    groups: dict[object, list[UpcomingOccurrence]] = {}
    for occurrence in occurrences:
        groups.setdefault(occurrence.occurrence_date, []).append(occurrence)
    return list(groups.items())


def _each_or_dash(template: str, rows: Iterable[tuple[object, ...]]) -> SafeString:
    """`template` filled in with each row, one after the other; a dash if there is none."""
    rows = list(rows)
    if not rows:
        return format_html("{}", "—")
    return format_html_join("", template, rows)


def what_html(occurrence: UpcomingOccurrence) -> SafeString:
    said = EventType(occurrence.event_type).label
    if occurrence.years is not None:
        said = f"{said}, {occurrence.years}"
    return format_html("{}", said)


def placements_html(occurrence: UpcomingOccurrence, *, words: bool = False) -> SafeString:
    """Where and when: each destination, as a message or in a digest, at its local time (UTC on hover)."""
    return _each_or_dash(
        '<p class="upcoming-placement" data-destination="{}">{} <a href="{}">{}</a> · {}{}</p>',
        (
            (
                placement.destination_name,
                f"Digest of {placement.digest_date:%a %d %b}:" if placement.digest else "Message:",
                reverse("admin:delivery_destination_change", args=[placement.destination_id]),
                placement.destination_name,
                widgets.when_in_zone(placement.at, placement.timezone),
                _words(occurrence, placement) if words or placement.default_language else "",
            )
            for placement in occurrence.placements
        ),
    )


def _words(occurrence: UpcomingOccurrence, placement) -> SafeString:
    if placement.digest:
        return format_html('<br><span class="bs-muted">“{}”</span>', placement.text)
    if placement.overridden:
        source = "the destination's own text"
    elif placement.default_language:
        source = f"no template in {occurrence.language}, so the default is used"
    else:
        source = f"template in {placement.language}" if placement.language else "the default template"
    return format_html('<br><span class="bs-muted upcoming-words">“{}” ({})</span>', placement.text, source)


def left_out_html(occurrence: UpcomingOccurrence) -> SafeString:
    return _each_or_dash(
        '<p class="upcoming-left-out" data-reason="{}">{}{}</p>',
        (
            (
                reason.reason.value,
                f"{reason.destination_name}: " if reason.destination_name else "",
                reason.label,
            )
            for reason in occurrence.left_out
        ),
    )


def next_greetings_html(occurrences: list[UpcomingOccurrence]) -> SafeString:
    """A recipient's next greetings, per type: where, when, in which words; or why not."""
    return _each_or_dash(
        '<div class="upcoming-next"><p><strong>{}</strong> on {}</p>{}{}</div>',
        (
            (
                what_html(o),
                f"{o.occurrence_date:%a %Y-%m-%d}",
                placements_html(o, words=True),
                left_out_html(o),
            )
            for o in occurrences
        ),
    )


def digests_html(digests: list[UpcomingDigest]) -> SafeString:
    """A destination's coming digests and the names each will carry."""
    return _each_or_dash(
        '<div class="upcoming-digest" data-date="{}"><p><strong>{}</strong>: {}{}</p></div>',
        (
            (
                digest.local_date.isoformat(),
                widgets.when_in_zone(digest.at, digest.timezone),
                ", ".join(o.line for o in digest.occurrences) or "nobody: nothing is sent that day",
                " and more" if digest.more else "",
            )
            for digest in digests
        ),
    )
