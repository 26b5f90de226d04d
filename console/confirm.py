"""A confirmation page in front of an action that cannot be taken back.

The changelist's action posts the selection; the first time the page says what
will happen and to how many, and the same form posted again with
`confirmed=yes` runs the action. Nothing changes until then (Django's own
"Delete selected" works the same way).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.contrib import messages
from django.contrib.admin import helpers
from django.template.response import TemplateResponse

CONFIRMED = "confirmed"
# The selected rows named on the page; the count covers them all.
LISTED = 50


@dataclass(frozen=True)
class Item:
    """One selected row as the page lists it, and what the action would do to it ("" : the usual)."""

    label: str
    refusal: str = ""


# The most rows one action takes at once: each is its own transaction, in this web request.
MOST_ROWS = 1000


def is_confirmed(request) -> bool:
    return request.POST.get(CONFIRMED) == "yes"


def selected_rows(modeladmin, request, queryset) -> list | None:
    """The selected rows, or None (the operator told why) when there are more than one request should take."""
    rows = list(queryset[: MOST_ROWS + 1])
    if len(rows) > MOST_ROWS:
        modeladmin.message_user(
            request,
            f"More than {MOST_ROWS:,} {modeladmin.opts.verbose_name_plural} are selected; nothing was done. "
            "Narrow the list with its filters first.",
            level=messages.ERROR,
        )
        return None
    return rows


def confirmation_page(
    modeladmin,
    request,
    *,
    title: str,
    consequence: str,
    button: str,
    items: Sequence[Item],
    carried: Mapping[str, str] | None = None,
) -> TemplateResponse:
    """The page asking whether to run the action posted, with its consequence and the rows it touches, and
    `carried` (the action bar's own fields, such as a label) posted back with the answer."""
    refused = [item for item in items if item.refusal]
    return TemplateResponse(
        request,
        "admin/confirm_action.html",
        {
            **modeladmin.admin_site.each_context(request),
            "title": title,
            "opts": modeladmin.opts,
            "consequence": consequence,
            "button": button,
            "action": request.POST.get("action", ""),
            "select_across": request.POST.get("select_across", "0"),
            "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "count": len(items) - len(refused),
            "refused": refused[:LISTED],
            "refused_count": len(refused),
            "listed": [item for item in items if not item.refusal][:LISTED],
            "more": max(len(items) - len(refused) - LISTED, 0),
            "confirmed_name": CONFIRMED,
            "carried": dict(carried or {}),
        },
    )


def confirmed_first(
    modeladmin,
    request,
    queryset,
    *,
    title: str,
    consequence: str,
    button: str,
    item: Callable[[Any], Item],
    run: Callable[[list], None],
    carried: Mapping[str, str] | None = None,
) -> TemplateResponse | None:
    """An action on each selected row: the confirmation page (each row as `item` lists it) first, then `run`."""
    rows = selected_rows(modeladmin, request, queryset)
    if rows is None:
        return None
    if not is_confirmed(request):
        return confirmation_page(
            modeladmin,
            request,
            title=title,
            consequence=consequence,
            button=button,
            items=[item(row) for row in rows],
            carried=carried,
        )
    run(rows)
    return None
