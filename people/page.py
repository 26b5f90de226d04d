"""The person's own page, opened by a signed link (users.services.personal_link_issue): what is stored
about them, where and when they will be greeted, and their choices, changed through the same services
as any edit (changed_by PERSON). docs/design.md, "The person's own page"."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from django.core.exceptions import ValidationError
from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import translation
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_http_methods

from config.throttling import PersonalPageThrottle
from delivery.actions.optouts import destination_opt_out_set, destination_opt_outs_of
from people.csrf import people_csrf_protect
from people.forms import SERVICE_FIELDS, PersonPageForm, event_type_name, visibility_field
from people.responses import not_found, page_language
from people.selectors import PersonView, person_view
from scheduling.celebration import ChangedBy, month_day, year_known
from scheduling.event_types import EventType
from users import services
from users.models import User
from users.selectors import personal_link_user, user_export

logger = logging.getLogger(__name__)


def _throttled(request: HttpRequest) -> HttpResponse | None:
    """A 429 page once the client address has used up PERSONAL_PAGE_THROTTLE, else None (counted)."""
    throttle = PersonalPageThrottle()
    # DRF's throttle reads only the client's address and the clock here (get_cache_key ignores
    # the view): a Django request serves as well as DRF's wrapper of it.
    if throttle.allow_request(request, None):  # type: ignore[arg-type]
        return None
    wait = throttle.wait()
    response = render(request, "people/throttled.html", {"page_language": "en"}, status=429)
    if wait is not None:
        response["Retry-After"] = str(max(1, round(wait)))
    return response


def _person(request: HttpRequest, token: str) -> tuple[User | None, HttpResponse | None]:
    refused = _throttled(request)
    if refused is not None:
        return None, refused
    user = personal_link_user(token=token)
    return user, (not_found() if user is None else None)


def _event_types(user: User) -> list[str]:
    """The event types they have: a birthday, and an anniversary if they gave its date."""
    return [EventType.BIRTHDAY, *([EventType.ANNIVERSARY] if user.anniversary_date else [])]


def _initial(user: User, view: PersonView, opted_out: set[int]) -> dict[str, object]:
    consent = {None: "", True: "yes", False: "no"}[user.mention_consent]
    return {
        "version": user.version,
        "hide_age": user.hide_age,
        "language": user.language,
        "send_time": user.send_time.strftime("%H:%M") if user.send_time else "",
        "slack_user_id": user.slack_user_id,
        "discord_user_id": user.discord_user_id,
        "teams_user_id": user.teams_user_id,
        "mention_consent": consent,
        "shown": [destination.id for destination in view.shared],
        "announce": [destination.id for destination in view.shared if destination.id not in opted_out],
        "announced": [destination.id for destination in view.shared if destination.id not in opted_out],
        **{
            visibility_field(event_type): view.choices.get(event_type, "")
            for event_type in _event_types(user)
        },
    }


def _form(user: User, view: PersonView, **kwargs: Any) -> PersonPageForm:
    return PersonPageForm(
        event_types=_event_types(user), defaults=view.defaults, shared=view.shared, **kwargs
    )


def _opted_out(user: User) -> set[int]:
    return destination_opt_outs_of(user_id=user.pk)


def _apply(*, user: User, form: PersonPageForm, view: PersonView) -> None:
    """Store every choice of the form, or (one refused) none: one transaction.

    A destination is left or rejoined only where the person changed its box (PersonPageForm.opt_outs).
    """
    listed = {destination.id: destination for destination in view.shared}
    with transaction.atomic():
        services.user_update(
            user=user,
            data=form.service_data(),
            expected_versions={form.cleaned_data["version"]},
            changed_by=ChangedBy.PERSON,
        )
        for destination_id, opted_out in form.opt_outs().items():
            if destination_id in listed:
                destination_opt_out_set(
                    user=user,
                    destination=listed[destination_id],
                    opted_out=opted_out,
                    changed_by=ChangedBy.PERSON,
                )


def _add_service_errors(form: PersonPageForm, error: ValidationError) -> None:
    """The services' errors on the form's fields they name (a visibility on the page's own boxes)."""
    fields: Iterable[tuple[str, list[str]]] = (
        error.message_dict.items() if hasattr(error, "error_dict") else [("", error.messages)]
    )
    for name, messages in fields:
        if name in SERVICE_FIELDS:
            form.add_error(name, messages)
        elif name == "visibility":
            form.add_error(visibility_field(EventType.BIRTHDAY), messages)
        else:
            form.add_error(None, messages)


def _render(
    request: HttpRequest,
    *,
    user: User,
    token: str,
    form: PersonPageForm,
    view: PersonView,
    status: int = 200,
    notice: str = "",
) -> HttpResponse:
    context = {
        "user": user,
        "birthday": user.date_of_birth.isoformat()
        if year_known(user.date_of_birth)
        else month_day(user.date_of_birth),
        "form": form,
        "view": view,
        "event_type_names": {event_type: event_type_name(event_type) for event_type in EventType.values},
        "export_url": reverse("people:export", kwargs={"token": token}),
        "saved": request.GET.get("saved") == "1" and status == 200,
        "notice": notice,
        "page_language": translation.get_language(),
    }
    response = render(request, "people/page.html", context, status=status)
    response["Content-Language"] = translation.get_language()
    return response


# Django's CSRF check, with the Origin this page's own no-referrer policy makes browsers send
# (people.csrf); exempt from the project's middleware only so that this one runs instead.
@csrf_exempt
@people_csrf_protect
@require_http_methods(["GET", "POST"])
def person_page(request: HttpRequest, token: str) -> HttpResponse:
    user, refused = _person(request, token)
    if refused is not None:
        return refused
    assert user is not None
    with translation.override(page_language(user.language)):
        opted_out = _opted_out(user)
        view = person_view(user=user, opted_out=opted_out)
        if request.method != "POST":
            form = _form(user, view, initial=_initial(user, view, opted_out))
            return _render(request, user=user, token=token, form=form, view=view)
        form = _form(user, view, data=request.POST)
        if not form.is_valid():
            return _render(request, user=user, token=token, form=form, view=view, status=400)
        try:
            _apply(user=user, form=form, view=view)
        except ValidationError as error:
            _add_service_errors(form, error)
            return _render(request, user=user, token=token, form=form, view=view, status=400)
        except services.VersionMismatch:
            # Shown again as stored now, with what changed meanwhile: nothing of theirs was stored.
            user = User.objects.get(pk=user.pk)
            view = person_view(user=user, opted_out=_opted_out(user))
            form = _form(user, view, initial=_initial(user, view, _opted_out(user)))
            notice = translation.gettext(
                "Your details were changed elsewhere while this page was open. Here they are as "
                "they are now; nothing was saved. Please make your change again."
            )
            return _render(request, user=user, token=token, form=form, view=view, status=409, notice=notice)
        except User.DoesNotExist:  # erased while this request waited
            return not_found()
    logger.info("A person changed their choices on their page", extra={"user_id": str(user.pk)})
    return redirect(reverse("people:page", kwargs={"token": token}) + "?saved=1")


@require_GET
def person_export(request: HttpRequest, token: str) -> HttpResponse:
    """Everything stored about them (the API's export), as a file to keep."""
    user, refused = _person(request, token)
    if refused is not None:
        return refused
    assert user is not None
    response = JsonResponse(
        user_export(user_id=user.pk), encoder=DjangoJSONEncoder, json_dumps_params={"indent": 2}
    )
    response["Content-Disposition"] = 'attachment; filename="my-data.json"'
    return response
