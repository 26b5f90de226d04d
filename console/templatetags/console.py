"""The console's template filters: one way to write a moment on every page."""

from __future__ import annotations

from django import template

from console import upcoming, widgets

register = template.Library()


@register.filter
def when(moment):
    """`{{ moment|when }}`: '2027-03-14 13:00 UTC' in a <time>, rewritten in the operator's zone by the page."""
    return widgets.when(moment)


@register.filter
def condition_badge(health):
    """A destination's condition (delivery.destinations.selectors.DestinationHealth) as its coloured badge."""
    from console.admin.destinations import condition_badge as badge_of

    return badge_of(health)


@register.filter
def upcoming_what(occurrence):
    """An upcoming occurrence's type and milestone (console.upcoming)."""
    return upcoming.what_html(occurrence)


@register.filter
def upcoming_placements(occurrence):
    """Where and when an upcoming occurrence goes, each at its local time with UTC on hover."""
    return upcoming.placements_html(occurrence)


@register.filter
def upcoming_left_out(occurrence):
    """Why an upcoming occurrence is left out, where it is."""
    return upcoming.left_out_html(occurrence)
