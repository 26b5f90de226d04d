"""Recipients in the operator console. Writes go through users.services."""

from __future__ import annotations

import logging
from datetime import timedelta

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.actions import delete_selected
from django.core.exceptions import ValidationError
from django.db.models import Prefetch
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.text import capfirst

from console import confirm, upcoming, widgets
from console.admin.events import retries_of
from console.forms import VISIBILITY_FIELDS, RecipientAdminForm
from console.pagination import BoundedListAdmin
from delivery.destinations.selectors import destination_audience_labels
from delivery.models import Delivery, DeliveryAttempt
from delivery.selectors import recipients_attempt_count
from delivery.upcoming.selectors import recipient_upcoming
from scheduling.celebration import ChangedBy
from scheduling.labels import clean_labels, labels_from_text
from scheduling.models import Event, EventStatus, EventType
from users import services
from users.fields import USER_FIELDS
from users.models import User
from users.selectors import recipient_messages, user_labels_filter, user_search_filter, user_timezones_in_use

logger = logging.getLogger(__name__)
LABEL_FIELD = "label"


class RecipientActionForm(helpers.ActionForm):
    """The changelist's action bar, with the box the label actions read their label from."""

    label = forms.CharField(
        required=False,
        label="Label",
        widget=forms.TextInput(attrs={"placeholder": "team:platform", "size": 16, "autocomplete": "off"}),
    )


class EventInline(widgets.ReadOnlyInlineMixin, admin.TabularInline):
    """The recipient's latest events, newest first; read-only (they change through the services)."""

    model = Event
    # Years of them are history: the latest only, and the events list has them all.
    formset = widgets.LatestRowsFormSet
    verbose_name_plural = f"events (the latest {widgets.LatestRowsFormSet.shown}; the events list has every one: search the recipient's id)"
    show_change_link = True
    ordering = ["-occurrence_date", "-created_at"]
    fields = readonly_fields = (
        "event_type",
        "occurrence_date",
        "target_timestamp_utc",
        "target_timestamp_local",
        "status_badge",
        "retries",
        "executed_at",
        "failure_reason",
    )

    @admin.display(description="status")
    def status_badge(self, event: Event):
        return widgets.badge(event.status, event.get_status_display())

    @admin.display(description="retries")
    def retries(self, event: Event) -> int:
        return retries_of(event)

    def get_queryset(self, request):
        return super().get_queryset(request).prefetch_related("deliveries")


class TimezoneFilter(admin.SimpleListFilter):
    """Recipients in one time zone, chosen among the zones in use (read without a DISTINCT over every recipient)."""

    title = "timezone"
    # Django's own filter's parameter, so links to it keep working.
    parameter_name = "timezone__exact"

    def lookups(self, request, model_admin):
        return [(zone, zone) for zone in user_timezones_in_use()]

    def queryset(self, request, queryset):
        return queryset.filter(timezone=self.value()) if self.value() else queryset


class LabelFilter(admin.SimpleListFilter):
    """Recipients holding a label: one typed, or one of those the destinations' audiences name.

    The choices are the audiences' labels (a few rows), not the labels every recipient holds,
    which only a read of every recipient could list; any other is typed into the box.
    """

    title = "label"
    parameter_name = "label"
    template = "admin/users/user/label_filter.html"

    def lookups(self, request, model_admin):
        return [(label, label) for label in destination_audience_labels()]

    def queryset(self, request, queryset):
        label = self.value()
        return queryset.filter(user_labels_filter(labels=[label])) if label else queryset

    def has_output(self) -> bool:
        # The box is there even while no audience names a label to offer.
        return True

    def choices(self, changelist):
        # The box's form keeps the list's other filters and search as hidden fields.
        self.kept_params = sorted(
            (name, value) for name, value in changelist.params.items() if name != self.parameter_name
        )
        yield from super().choices(changelist)


# What a recipient's greetings section shows: all of it computed or set by the greeting paths, so read-only.
_GREETINGS = (
    "greetings",
    "where_and_when",
    "paused_at",
    "paused_by",
    "resumed_at",
    "resumed_by",
    "email_undeliverable_at",
    "email_undeliverable_reason",
)


@admin.register(User)
class RecipientAdmin(BoundedListAdmin):
    form = RecipientAdminForm
    # Who, then what is next and whether it goes out: the columns read at any width; the
    # recipient's own data after them (console/tests/test_browser_layout.py).
    list_display = [
        "name",
        "next_birthday_utc",
        "next_status",
        "greetings",
        "labels_shown",
        "next_birthday_local",
        "date_of_birth",
        "anniversary_date",
        "send_time_shown",
        "external_id",
    ]
    list_display_links = ["name"]
    # What the search box looks in; get_search_results does the matching.
    search_fields = ["first_name", "last_name", "external_id"]
    search_help_text = (
        "First or last name (or both; a word of fewer than three letters matches the start of a name), "
        "an external id, or a recipient id."
    )
    list_filter = [LabelFilter, TimezoneFilter]
    list_per_page = 50
    inlines = [EventInline]
    fieldsets = [
        (
            None,
            {"fields": [field for field in USER_FIELDS if field != "hide_age"]},
        ),
        (
            "The person's say",
            {
                "fields": [
                    "hide_age",
                    *VISIBILITY_FIELDS.values(),
                    "destinations_left",
                    "links_issued",
                    "messages_they_get",
                    "celebration_record",
                ]
            },
        ),
        (
            "Greetings",
            {"fields": _GREETINGS},
        ),
        ("Record", {"fields": ["id", "created_at", "updated_at"]}),
    ]
    readonly_fields = [
        "destinations_left",
        "links_issued",
        "messages_they_get",
        "celebration_record",
        "id",
        "created_at",
        "updated_at",
        *_GREETINGS,
    ]
    actions = [
        "add_label",
        "remove_label",
        "pause_greetings",
        "resume_greetings",
        "issue_personal_link",
        "delete_selected",
    ]
    # The action bar's label box, which the label actions read.
    action_form = RecipientActionForm

    def get_inlines(self, request, obj):
        return self.inlines if obj else []

    def get_fieldsets(self, request, obj=None):
        # The record's id and timestamps do not exist yet on the add form, nor messages and changes.
        if obj:
            return self.fieldsets
        first, (say_title, _say) = self.fieldsets[0], self.fieldsets[1]
        return [first, (say_title, {"fields": ["hide_age", *VISIBILITY_FIELDS.values()]})]

    def get_queryset(self, request):
        # The pending event of each listed recipient, in one extra query per page.
        return (
            super()
            .get_queryset(request)
            .prefetch_related(
                Prefetch(
                    "events",
                    queryset=Event.objects.filter(status=EventStatus.PENDING).order_by(
                        "target_timestamp_utc"
                    ),
                    to_attr="pending_events",
                )
            )
        )

    def get_search_results(self, request, queryset, search_term):
        as_uuid = widgets.parse_uuid(search_term)
        if as_uuid is not None:
            return queryset.filter(id=as_uuid), False
        # Not Django's own search: its icontains on an external id reads every
        # recipient, and so would a word too short for the trigram indexes.
        return queryset.filter(user_search_filter(term=search_term)), False

    def save_model(self, request, obj, form, change):
        operator = request.user.get_username()
        visibility = form.visibility_changes()
        if change:
            # Only what the operator changed: an API edit made while the form was
            # open keeps its fields.
            changed: dict = {f: form.cleaned_data[f] for f in USER_FIELDS if f in form.changed_data}
            if visibility:
                changed["visibility"] = visibility
            services.user_update(user=obj, data=changed, by=operator, changed_by=ChangedBy.OPERATOR)
        else:
            fields = {f: form.cleaned_data[f] for f in USER_FIELDS}
            obj.pk = services.user_create(
                **fields, visibility=visibility, by=operator, changed_by=ChangedBy.OPERATOR
            ).pk

    # --- the person's say ----------------------------------------------------------

    @admin.display(description="destinations they left")
    def destinations_left(self, user: User):
        """The destinations the person opted out of (delivery.actions.optouts): nothing of theirs goes there."""
        left = list(user.destination_opt_outs.select_related("destination").order_by("destination__name"))
        if not left:
            return "None: every destination that wants them may greet them."
        return format_html_join(
            "",
            "<p>{} (since {}, by {})</p>",
            (
                (
                    o.destination.name,
                    timezone.localtime(o.created_at).strftime("%Y-%m-%d %H:%M"),
                    o.get_changed_by_display(),
                )
                for o in left
            ),
        )

    @admin.display(description="links to their page")
    def links_issued(self, user: User):
        """Who issued which link to the person's own page, and when; only the latest opens it (never the URL)."""
        issued = list(user.personal_links.order_by("-issued_at", "-id")[:5])
        if not issued:
            return "None issued."
        max_age = timedelta(days=settings.PERSONAL_LINK_MAX_AGE_DAYS)
        now = timezone.now()
        return format_html_join(
            "",
            "<p>{} by {}{}: {}</p>",
            (
                (
                    timezone.localtime(link.issued_at).strftime("%Y-%m-%d %H:%M"),
                    link.get_issued_by_display(),
                    f" ({link.actor})" if link.actor else "",
                    "revoked by a later link"
                    if i
                    else ("expired" if link.issued_at + max_age <= now else "opens their page"),
                )
                for i, link in enumerate(issued)
            ),
        )

    @admin.display(description="the texts they will get")
    def messages_they_get(self, user: User):
        """Each pending occurrence's text as the scheduler would render it now, and why if it is a fallback."""
        rows = recipient_messages(user=user)
        if not rows:
            return "—"
        return format_html_join(
            "",
            '<p><strong>{}</strong> ({}): {}<br><span class="bs-muted">{}</span></p>',
            ((row.event_type, row.visibility, row.text, row.note) for row in rows),
        )

    @admin.display(description="next greetings: where, when, in which words")
    def where_and_when(self, user: User):
        """Each of their next occurrences: the destinations, the local time (UTC on hover), the words; or why not."""
        return upcoming.next_greetings_html(recipient_upcoming(user_id=user.pk, now=timezone.now()))

    @admin.display(description="record of their choices")
    def celebration_record(self, user: User):
        changes = list(user.celebration_changes.order_by("changed_at", "id"))
        if not changes:
            return "No change recorded: the company defaults, age said when known."
        return format_html_join(
            "",
            "<p>{}: {} {} from {} to {}, by {}{}</p>",
            (
                (
                    timezone.localtime(c.changed_at).strftime("%Y-%m-%d %H:%M"),
                    c.field,
                    c.event_type or c.destination_name,
                    c.old_value or "default",
                    c.new_value or "default",
                    c.get_changed_by_display(),
                    f" ({c.actor})" if c.actor else "",
                )
                for c in changes
            ),
        )

    # --- erasure, through users.services.user_erase --------------------------------
    # The confirmation pages (templates/admin/users/user/) say what the erase
    # deletes and what it keeps: Django's collector lists every row a cascade
    # would reach, but the erase keeps each delivery attempt, stripped.

    def get_deleted_objects(self, objs, request):
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        # A recipient's events and deliveries go with them (users.services.user_erase).
        # The console refuses deleting those alone, not as part of their recipient.
        perms_needed -= {Event._meta.verbose_name, Delivery._meta.verbose_name}
        attempts = DeliveryAttempt._meta
        counts.pop(str(attempts.verbose_name_plural), None)
        # The collector's list holds each row as text, "<Verbose name>: <row>", its rows below it.
        deleted = _without_rows(deleted, prefix=f"{capfirst(attempts.verbose_name)}: ")
        return deleted, counts, perms_needed, protected

    def delete_view(self, request, object_id, extra_context=None):
        if request.method != "POST":  # the confirmation; a POST erases
            pk = widgets.parse_uuid(object_id)
            recipient = User.objects.filter(pk=pk) if pk is not None else User.objects.none()
            extra_context = {**(extra_context or {}), "erasure": _erasure_kept(recipient)}
        return super().delete_view(request, object_id, extra_context)

    @admin.action(description="Erase the selected recipients", permissions=["delete"])
    def delete_selected(self, request, queryset):
        """Django's own action (its confirmation, then delete_queryset), with what the erase keeps."""
        response = delete_selected(self, request, queryset)
        if isinstance(response, TemplateResponse):  # the confirmation; None once erased
            assert response.context_data is not None  # a confirmation page has its context
            response.context_data["erasure"] = _erasure_kept(queryset)
        return response

    def delete_model(self, request, obj):
        services.user_erase(user=obj)

    def delete_queryset(self, request, queryset):
        for user in queryset:
            services.user_erase(user=user)

    # --- labels, through users.services.user_labels_change ----------------------------

    @admin.action(
        description="Add the label typed beside to the selected recipients…", permissions=["change"]
    )
    def add_label(self, request, queryset):
        return self._change_label(request, queryset, add=True)

    @admin.action(
        description="Remove the label typed beside from the selected recipients…", permissions=["change"]
    )
    def remove_label(self, request, queryset):
        return self._change_label(request, queryset, add=False)

    def _change_label(self, request, queryset, *, add: bool):
        try:
            labels = clean_labels(labels_from_text(request.POST.get(LABEL_FIELD, "")))
        except ValidationError as exc:
            self.message_user(request, " ".join(exc.messages) + " Nothing was changed.", level=messages.ERROR)
            return None
        if len(labels) != 1:
            self.message_user(
                request,
                "Type one label in the box beside the action (such as team:platform). Nothing was changed.",
                level=messages.ERROR,
            )
            return None
        [label] = labels
        operator = request.user.get_username()
        verb, to = ("Added", "to") if add else ("Removed", "from")

        def run(rows: list[User]) -> None:
            changed = 0
            for user in rows:
                if services.user_labels_change(
                    user=user, **({"add": [label]} if add else {"remove": [label]})
                ):
                    changed += 1
                    self.log_change(request, user, f"{verb} label {label}")
            others = "; the others already had it." if add else "; the others did not have it."
            self.message_user(
                request,
                f"{verb} the label {label} {to} {changed} recipient(s)"
                + (others if changed < len(rows) else "."),
            )
            logger.info("Label %s by %s", verb.lower(), operator, extra={"label": label, "changed": changed})

        return confirm.confirmed_first(
            self,
            request,
            queryset,
            title=f"Add the label {label}?" if add else f"Remove the label {label}?",
            consequence=(
                f"Each recipient below gets the label {label}: the destinations whose audience names it greet "
                "them from the next occurrence claimed, and those that exclude it stop."
                if add
                else f"Each recipient below loses the label {label}: the destinations whose audience names it "
                "stop greeting them from the next occurrence claimed, unless another of their labels is named."
            ),
            button=f"Yes, add {label}" if add else f"Yes, remove {label}",
            item=lambda user: confirm.Item(
                label=str(user),
                refusal=(
                    ("already holds it" if label in user.labels else "")
                    if add
                    else ("" if label in user.labels else "does not hold it")
                ),
            ),
            run=run,
            carried={LABEL_FIELD: label},
        )

    # --- pause and resume, through users.services ---------------------------------

    @admin.action(description="Pause the selected recipients' greetings", permissions=["change"])
    def pause_greetings(self, request, queryset):
        self._set_paused(request, queryset, paused=True)

    @admin.action(description="Resume the selected recipients' greetings", permissions=["change"])
    def resume_greetings(self, request, queryset):
        self._set_paused(request, queryset, paused=False)

    def _set_paused(self, request, queryset, *, paused: bool) -> None:
        operator = request.user.get_username()
        changed = 0
        for user in queryset:
            before = user.version
            updated = services.user_update(user=user, data={"paused": paused}, by=operator)
            if updated.version != before:
                changed += 1
                self.log_change(request, updated, "Paused greetings" if paused else "Resumed greetings")
        verb = "Paused" if paused else "Resumed"
        self.message_user(
            request,
            f"{verb} the greetings of {changed} recipient(s)"
            + ("; the others already were." if changed < len(queryset) else "."),
        )

    # --- the person's own page, through users.services.personal_link_issue ------------

    @admin.action(
        description="Issue a link to their own page (ends the one before; shown once)", permissions=["change"]
    )
    def issue_personal_link(self, request, queryset):
        """A new link for each selected recipient, on a page of its own: never in a message, which
        the session would keep, nor in the console's log."""
        operator = request.user.get_username()
        issued = [
            (
                user,
                services.personal_link_issue(user_id=user.pk, issued_by=ChangedBy.OPERATOR, actor=operator),
            )
            for user in queryset.order_by("last_name", "first_name", "id")
        ]
        response = TemplateResponse(
            request,
            "admin/users/user/personal_links.html",
            {
                **self.admin_site.each_context(request),
                "title": "Links to their own pages",
                "opts": self.model._meta,
                "issued": issued,
            },
        )
        response["Cache-Control"] = "no-store"
        response["Referrer-Policy"] = "no-referrer"
        return response

    # --- columns ------------------------------------------------------------------

    @admin.display(description="greetings")
    def greetings(self, user: User):
        if user.paused:
            return widgets.badge("OVERDUE", f"Paused by {user.paused_by}")
        # Not "Sent": whether their greetings go out, not whether one went.
        return widgets.badge("COMPLETED", "Going out")

    @staticmethod
    def _next(user: User) -> Event | None:
        # The birthday, as the columns say; the change page lists every event.
        return next(
            (e for e in getattr(user, "pending_events", []) if e.event_type == EventType.BIRTHDAY), None
        )

    @admin.display(description="labels")
    def labels_shown(self, user: User) -> str:
        return ", ".join(user.labels) or "—"

    @admin.display(description="send time")
    def send_time_shown(self, user: User) -> str:
        return user.send_time.strftime("%H:%M") if user.send_time else f"default ({settings.EVENT_SEND_TIME})"

    @admin.display(description="name", ordering="last_name")
    def name(self, user: User) -> str:
        return user.full_name

    @admin.display(description="their local time and zone")
    def next_birthday_local(self, user: User):
        event = self._next(user)
        if event is None:
            return format_html('<span class="bs-muted">{}</span>', user.timezone)
        return widgets.local_time(event.target_timestamp_local, user.timezone)

    @admin.display(description="next birthday")
    def next_birthday_utc(self, user: User):
        event = self._next(user)
        return widgets.when(event.target_timestamp_utc) if event else "—"

    @admin.display(description="status")
    def next_status(self, user: User):
        event = self._next(user)
        if event is None:
            return "—"
        if event.target_timestamp_utc < timezone.now():
            return widgets.badge("OVERDUE", "Pending, overdue")
        return widgets.badge(event.status, event.get_status_display())


def _without_rows(rows: list, *, prefix: str) -> list:
    """Django's nested list of rows to delete (text, then a list of the rows below it) without the rows of `prefix`."""
    kept: list = []
    for row in rows:
        if isinstance(row, list):
            below = _without_rows(row, prefix=prefix)
            if below:
                kept.append(below)
        elif not str(row).startswith(prefix):
            kept.append(row)
    return kept


def _erasure_kept(recipients) -> dict:
    """What erasing these recipients keeps, for the confirmation page (docs/operations.md, "Erasing")."""
    user_ids = list(recipients.values_list("pk", flat=True))
    return {
        "attempts": recipients_attempt_count(user_ids=user_ids),
        "keyed": recipients.filter(external_id__isnull=False).exists(),
        "history_retention_days": settings.HISTORY_RETENTION.days,
    }
