"""Destinations in the operator console: where greetings go, their secrets (hints only), Pause and Resume,
a test message.

A receiver URL is a credential (delivery.credentials.receiver_urls): lists and forms show
its redacted form, and its change page has a "Reveal the URL" button for an
operator allowed to change it, whose page shows the URL and is never cached.

Every change goes through delivery.destinations.services, as from the API. A
new secret (on creation, on rotation) is shown once, in the page's messages,
and never rendered again. The change form carries the version it was opened
at, the console's If-Match: a save over someone else's change is refused.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.cache import add_never_cache_headers
from django.utils.html import format_html, format_html_join

from console import upcoming, widgets
from console.admin.endpoints import endpoint_state_badge
from console.admin.recoveries import DestinationRecoveryAdminMixin
from console.admin.row_values import row_value, row_value_set
from console.forms import LabelsFormField, TimeOfDayFormField
from delivery.actions.ping import destinations_send_test
from delivery.destinations import services
from delivery.destinations.audience import Audience
from delivery.destinations.fields import EDITABLE_FIELDS, SETTINGS, URL_MAX_LENGTH, DestinationSettings
from delivery.destinations.selectors import (
    DestinationHealth,
    destination_endpoints,
    destination_recipients,
    destination_unsent_count,
    destinations_health,
)
from delivery.models import CalendarFeed, Destination, DigestLanguage, EndpointState, Weekday, Weekend
from delivery.rules import conditions
from delivery.upcoming.feeds import calendar_feed_issue, calendar_feed_revoke
from delivery.upcoming.selectors import destination_upcoming_digests
from kinds import kind_for
from scheduling.event_types import EventType
from scheduling.handlers import get_handler
from scheduling.messages import placeholder_list

SECRET_SHOWN_ONCE = (
    "Signing secret of {name}, shown this once (copy it to the receiver now; afterwards only its hint is "
    "shown): {value}"
)
CHANGED_SINCE = (
    "This destination was changed since you opened it (by {updated_by}, now at version {version}): nothing was "
    "saved. Reload the page to see that change, then make yours again."
)


def message_field(event_type: str) -> str:
    return f"message_{event_type.lower()}"


def form_help(name: str) -> str:
    """The console's words for a destination's setting (delivery.destinations.fields)."""
    return SETTINGS[name].form_help


class DestinationForm(forms.ModelForm):
    # Not the model's: it keeps the URL encrypted. Empty on a change page (never rendered with the URL in it):
    # left empty, the URL stays as it is.
    # Text, not a URLField: an email destination's relay is smtps:// or smtp://, which the service judges.
    url = forms.CharField(
        max_length=URL_MAX_LENGTH,
        required=False,
        widget=forms.URLInput(attrs={"autocomplete": "off"}),
        help_text=form_help("url"),
    )
    event_types = forms.MultipleChoiceField(
        choices=EventType.choices,
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text=form_help("event_types"),
    )
    audience_labels = LabelsFormField(label="Audience", help_text=form_help("audience_labels"))
    excluded_labels = LabelsFormField(label="Excluded labels", help_text=form_help("excluded_labels"))
    # Text, read by the one HH:MM rule as the API's is (the destination's cleaner).
    digest_time = TimeOfDayFormField(
        widget=forms.TextInput(attrs={"placeholder": "HH:MM"}), help_text=form_help("digest_time")
    )
    secret = forms.CharField(
        required=False,
        strip=True,
        widget=forms.PasswordInput(render_value=False),
        help_text="On creation only: a secret of your own (whsec_ + base64 of 24 to 64 bytes). Left empty, one "
        "is made and shown once. Slack, Discord and Teams are not signed (their webhook URL is the credential): "
        "they get none.",
    )

    # Never rendered back; left empty on a change page, the password stays.
    smtp_password = forms.CharField(
        required=False,
        strip=False,
        label="SMTP password",
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text=form_help("smtp_password"),
    )

    # The version the page was opened at, posted back: the API's If-Match for the console. Not `version`,
    # which the model form would copy onto the destination.
    loaded_version = forms.IntegerField(required=False, widget=forms.HiddenInput)

    class Meta:
        model = Destination
        # The declared settings; message_overrides is typed in one box per event type (below).
        fields = [name for name in EDITABLE_FIELDS if name not in ("message_overrides", "smtp_password")]
        help_texts = {name: form_help(name) for name in EDITABLE_FIELDS}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Left out of a post (an older page, a script): on the day, the default. (A view-only page has no field.)
        for name in ("weekend", "digest_days_ahead", "digest_language"):
            # Left out of a post (an older page, a script): the default. (A view-only page has no field.)
            if name in self.fields:
                self.fields[name].required = False
        if self.instance.pk:
            self.fields["loaded_version"].initial = self.instance.version
            self.fields["url"].help_text = (
                f"Now {self.instance.url_display} (the button above reveals it whole). Left empty, it stays; "
                "a new URL takes the deliveries waiting with it, and a pause too. "
                + self.fields["url"].help_text
            )
        else:
            self.fields["url"].required = True
        for event_type in EventType.values:
            self.fields[message_field(event_type)].initial = (self.instance.message_overrides or {}).get(
                event_type, ""
            )

    def clean(self):
        cleaned = super().clean()
        assert cleaned is not None  # ModelForm.clean returns cleaned_data
        cleaned["message_overrides"] = {
            event_type: cleaned[message_field(event_type)]
            for event_type in EventType.values
            if (cleaned.get(message_field(event_type)) or "").strip()
        }
        cleaned["weekend"] = cleaned.get("weekend") or Weekend.ON_THE_DAY
        cleaned["digest_days_ahead"] = cleaned.get("digest_days_ahead") or 0
        cleaned["digest_weekday"] = cleaned.get("digest_weekday") or None
        cleaned["digest_language"] = cleaned.get("digest_language") or DigestLanguage.EN
        loaded = cleaned.get("loaded_version")
        # The instance was read for this request: a version above the one loaded is someone else's save.
        # (Between this read and the save, the service checks again under the row's lock.)
        if self.instance.pk and loaded is not None and loaded != self.instance.version:
            self.add_error(
                None,
                CHANGED_SINCE.format(
                    updated_by=self.instance.updated_by or "?", version=self.instance.version
                ),
            )
        try:
            cleaned.update(
                services.destination_values_clean(
                    values=self.settings_given(cleaned), exclude=self.instance.pk
                )
            )
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                self.add_error(field if field in self.fields else None, errors)
        if not self.instance.pk and cleaned.get("format"):
            # The secret a new destination starts with, checked here so the service never refuses it on save.
            try:
                services.destination_secret_clean(format=cleaned["format"], secret=cleaned.get("secret"))
            except ValidationError as exc:
                self.add_error("secret", exc.message_dict["secret"])
        return cleaned

    def settings_given(self, cleaned: dict) -> dict:
        """The declared settings among `cleaned`; on a change page an empty URL box keeps the URL."""
        values = {name: cleaned[name] for name in EDITABLE_FIELDS if name in cleaned}
        if self.instance.pk and not values.get("url"):
            values.pop("url", None)  # left empty: the URL stays
        if self.instance.pk and not values.get("smtp_password"):
            values.pop("smtp_password", None)  # left empty: the password stays
        return values

    def validate_unique(self):
        # The service's check names the field; the model's would query the same thing again.
        return


# One box per event type for the destination's own text (message_overrides), declared on the
# class so that the admin's fieldsets may name them.
for _event_type, _label in EventType.choices:
    DestinationForm.base_fields[message_field(_event_type)] = DestinationForm.declared_fields[
        message_field(_event_type)
    ] = forms.CharField(
        required=False,
        strip=False,
        label=f"{_label} message",
        widget=forms.Textarea(attrs={"rows": 2, "cols": 80}),
        help_text=f"Its own text for {_label.lower()} messages instead of the templates' (any language, any "
        f"milestone), with the placeholders {placeholder_list(get_handler(_event_type).placeholders)}. Empty: "
        "the templates'.",
    )


class DestinationChangeList(ChangeList):
    """The change list, with the health of each destination of the page read at once (three queries)."""

    def get_results(self, request):
        super().get_results(request)
        self.result_list = list(self.result_list)
        health = destinations_health(now=timezone.now(), destinations=self.result_list)
        for destination, its_health in zip(self.result_list, health, strict=True):
            row_value_set(destination, "health", its_health)


def health_of(destination: Destination) -> DestinationHealth:
    return row_value(
        destination, "health", lambda: destinations_health(now=timezone.now(), destinations=[destination])[0]
    )


def condition_badge(health: DestinationHealth):
    return widgets.badge(CONDITION_COLOURS[health.condition.level], health.condition.label)


# A destination's condition (delivery.rules.conditions) -> a badge colour of widgets.BADGE_COLOURS.
CONDITION_COLOURS = {
    conditions.FAILING: "DEAD",
    conditions.DEGRADED: "OVERDUE",
    conditions.PAUSED: "ABANDONED",
    conditions.OK: "DELIVERED",
    conditions.IDLE: "stopped",
    conditions.DISABLED: "stopped",
}


# The destination form's sections that do not depend on whether it is saved yet (get_fieldsets).
_EMAIL_FIELDSET = (
    "Email",
    {
        "fields": [
            "email_from",
            "email_from_name",
            "email_reply_to",
            "email_to",
            "smtp_username",
            "smtp_password",
            "email_resend_unknown",
        ],
        "description": "Format email only: its URL is the SMTP relay (smtps://host:465, or "
        "smtp://host:587 with STARTTLS); the relay signs the mail (DKIM) for the From's domain.",
    },
)
_PACE_FIELDSET = (
    "Pace",
    {
        "fields": ["max_rate", "max_in_flight", "timeout"],
        "description": "Empty: WEBHOOK_MAX_RATE, WEBHOOK_MAX_IN_FLIGHT, WEBHOOK_TIMEOUT.",
    },
)
_DIGEST_FIELDS = [
    "digest_time",
    "digest_timezone",
    "weekend",
    "digest_days_ahead",
    "digest_weekday",
    "digest_language",
]
_WORDS_FIELDSET = (
    "Words",
    {
        "fields": [message_field(event_type) for event_type in EventType.values],
        "description": "Its own text per event type, e.g. 🎂 Happy birthday, {first_name}! for a chat "
        "channel; the recipients' languages and milestones are the message templates'.",
    },
)
# Only a saved destination has these.
_SAVED_FIELDSETS = [
    (
        "Calendar feed",
        {
            "fields": ["calendar_feed_state"],
            "description": "An .ics address listing the coming 12 months of the celebrations this "
            "destination may announce (public, in its audience, not paused), as all-day events "
            "without year or age. The address is a credential: shown once when issued.",
        },
    ),
    ("Health", {"fields": ["condition_detail"]}),
    ("Changes", {"fields": ["created_by", "created_at", "updated_by", "updated_at"]}),
]


@admin.register(Destination)
class DestinationAdmin(DestinationRecoveryAdminMixin, admin.ModelAdmin):
    form = DestinationForm
    # What tells whether it works comes first; the URL sits under the name, so the row fits a laptop.
    list_display = [
        "name_and_url",
        "condition",
        "dead_counts",
        "last_failure",
        "last_delivered",
        "subscriptions",
        "audience",
        "digest",
        "enabled",
    ]
    list_filter = ["enabled", "format"]
    search_fields = ["name", "url_display"]
    actions = ["send_test", "rotate_secret", "drop_previous_secrets", "pause", "resume"]
    change_form_template = "admin/delivery/destination/change_form.html"
    readonly_fields = [
        "next_digest",
        "coming_digests",
        "calendar_feed_state",
        "audience_size",
        "secret_hints",
        "condition_detail",
        "created_by",
        "created_at",
        "updated_by",
        "updated_at",
    ]

    def get_fieldsets(self, request, obj=None):
        saved = obj is not None
        main = ["name", "url", "event_types", "format", "mention_recipient", "enabled", "personal"]
        main.append("loaded_version" if saved else "secret")
        return [
            (None, {"fields": main}),
            _EMAIL_FIELDSET,
            _PACE_FIELDSET,
            (
                "Daily or weekly digest",
                {
                    "fields": [*_DIGEST_FIELDS, *(["next_digest", "coming_digests"] if saved else [])],
                    "description": "One message a day (or a week) naming its dates' people in its audience, "
                    "exactly once per date (or week), in its format; a chat service's limit keeps as many names "
                    "as fit and says how many more there are.",
                },
            ),
            (
                "Audience",
                {
                    "fields": ["audience_labels", "excluded_labels", *(["audience_size"] if saved else [])],
                    "description": "Whom it greets, by the recipients' labels. Applies to the occurrences "
                    "claimed after it is saved; one already queued keeps its deliveries.",
                },
            ),
            _WORDS_FIELDSET,
            ("Signing", {"fields": ["secret_hints"]}),
            # A destination being added has no feed, condition or history yet: no "Healthy" for what does not exist.
            *(_SAVED_FIELDSETS if saved else []),
        ]

    def get_changelist(self, request, **kwargs):
        return DestinationChangeList

    def get_urls(self):
        # Before the default ones, whose "<path:object_id>/" would take "<id>/test/" as an id.
        return [
            path(
                "<path:object_id>/test/",
                self.admin_site.admin_view(self.send_test_view),
                name=f"{self.opts.app_label}_{self.opts.model_name}_test",
            ),
            path(
                "<path:object_id>/calendar-feed/",
                self.admin_site.admin_view(self.calendar_feed_view),
                name=f"{self.opts.app_label}_{self.opts.model_name}_calendar_feed",
            ),
            path(
                "<path:object_id>/url/",
                self.admin_site.admin_view(self.reveal_url_view),
                name=f"{self.opts.app_label}_{self.opts.model_name}_url",
            ),
            *super().get_urls(),
        ]

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except services.DestinationVersionMismatch:
            # Saved by someone else after this request read the destination and before its save (which
            # the admin's transaction rolled back): run again, and the form's check now says so.
            return super().changeform_view(request, object_id, form_url, extra_context)

    def get_actions(self, request):
        # Deleting goes through the page of one destination, which refuses while deliveries wait.
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions

    # --- columns ------------------------------------------------------------------

    @admin.display(description="subscriptions")
    def subscriptions(self, destination: Destination) -> str:
        labels = dict(EventType.choices)
        return (
            ", ".join(labels[t] for t in destination.event_types) if destination.event_types else "every type"
        )

    @admin.display(description="digest")
    def digest(self, destination: Destination) -> str:
        if destination.digest_time is None:
            return "per greeting"
        every = f"{Weekday(destination.digest_weekday).label}s" if destination.digest_weekday else "daily"
        ahead = f", {destination.digest_days_ahead} days ahead" if destination.digest_days_ahead else ""
        return format_html(
            "{} {} {}{}; next {}",
            every,
            f"{destination.digest_time:%H:%M}",
            destination.digest_timezone,
            ahead,
            self.next_digest(destination),
        )

    @admin.display(description="next digest")
    @admin.display(description="coming digests")
    def coming_digests(self, destination: Destination):
        """The next digests with the names they will carry, as things stand now."""
        if not destination.takes_digest:
            return "—"
        return upcoming.digests_html(
            destination_upcoming_digests(destination=destination, now=timezone.now())
        )

    @admin.display(description="calendar feed")
    def calendar_feed_state(self, destination: Destination) -> str:
        feed = CalendarFeed.objects.filter(destination=destination).first()
        if feed is None:
            return "None issued."
        return format_html(
            "Issued by {} at {}; its address is not shown again.",
            feed.created_by,
            widgets.when(feed.created_at),
        )

    def next_digest(self, destination: Destination) -> str:
        # The one that will be sent (never a date already built: digest_schedule), at the destination's own
        # time in its zone, UTC on hover.
        if destination.next_digest_at is None:
            return "— (no digest)"
        return widgets.when_in_zone(destination.next_digest_at, destination.digest_timezone)

    @admin.display(description="audience")
    def audience(self, destination: Destination) -> str:
        return Audience.of(destination).describe()

    @admin.display(description="greets now")
    def audience_size(self, destination: Destination) -> str:
        audience = Audience.of(destination)
        if audience.everyone:
            return "every recipient"
        return f"{destination_recipients(destination=destination).count():,} recipient(s)"

    @admin.display(description="destination", ordering="name")
    def name_and_url(self, destination: Destination):
        return format_html(
            '<strong>{}</strong><br><span class="bs-muted bs-url">{}</span>',
            destination.name,
            destination.url_display,  # the URL is a credential: its host alone (delivery.credentials.receiver_urls)
        )

    @admin.display(description="health")
    def condition(self, destination: Destination):
        return condition_badge(health_of(destination))

    @admin.display(description="dead 1 h / 24 h")
    def dead_counts(self, destination: Destination):
        health = health_of(destination)
        return format_html(
            '<span class="{}">{} / {}</span>',
            "bs-late" if health.dead_last_day else "bs-muted",
            health.dead_last_hour,
            health.dead_last_day,
        )

    @admin.display(description="last failure")
    def last_failure(self, destination: Destination):
        health = health_of(destination)
        if health.endpoint_last_error:
            return format_html("{}<br>{}", health.endpoint_last_error, widgets.when(health.last_failure_at))
        if not health.last_failure_at:
            return "—"
        return format_html("{}<br>{}", health.last_failure_label, widgets.when(health.last_failure_at))

    @admin.display(description="last delivered")
    def last_delivered(self, destination: Destination):
        return (
            widgets.when(health_of(destination).last_delivered_at)
            if health_of(destination).last_delivered_at
            else "never"
        )

    @admin.display(description="health")
    def condition_detail(self, destination: Destination):
        health = health_of(destination)
        failures_url = reverse("admin:failures") + f"?destination={destination.pk}"
        return format_html(
            '<div id="destination-condition">{} {}</div>'
            "<div>Dead in the last hour: <strong>{}</strong>; in the last day: <strong>{}</strong>. "
            '<a href="{}">Its failures by cause</a></div>'
            "<div>Last failure: {}</div>{}<div>Last delivered: {}</div><div>Endpoint: {}</div>",
            condition_badge(health),
            health.condition.reason,
            health.dead_last_hour,
            health.dead_last_day,
            failures_url,
            format_html(
                "{} ({})",
                health.endpoint_last_error or health.last_failure_label,
                widgets.when(health.last_failure_at),
            )
            if health.last_failure_at or health.endpoint_last_error
            else "none in the last 7 days",
            format_html('<div class="failure-hint bs-muted">{}</div>', health.last_failure_hint)
            if health.last_failure_hint
            else "",
            widgets.when(health.last_delivered_at) if health.last_delivered_at else "never",
            endpoint_state_badge_of(destination=destination, health=health),
        )

    @admin.display(description="signing secrets")
    def secret_hints(self, destination: Destination):
        secrets = list(destination.secrets.order_by("-created_at", "-id")) if destination.pk else []
        if not secrets:
            return (
                "— (not signed: its service checks no signature; its webhook URL is the credential)"
                if not kind_for(destination.format).signed
                else "— (unsigned)"
            )
        return format_html_join(
            "",
            "<div><code>{}</code> <span class='bs-muted'>{}</span></div>",
            (
                (s.hint, format_html("until {}", widgets.when(s.expires_at)) if s.expires_at else "in force")
                for s in secrets
            ),
        )

    # --- writes ---------------------------------------------------------------------

    def save_model(self, request, obj, form, change):
        operator = request.user.get_username()
        values = form.settings_given(form.cleaned_data)
        if change:
            loaded = form.cleaned_data.get("loaded_version")
            services.destination_update(
                destination=obj,
                operator=operator,
                changes=values,
                expected_versions=[loaded] if loaded is not None else None,
            )
            return
        created = services.destination_create(
            settings=DestinationSettings(**values), operator=operator, secret=form.cleaned_data.get("secret")
        )
        obj.pk = created.destination.pk
        if created.value is not None:  # a chat kind is not signed: no secret to show
            self.message_user(
                request, SECRET_SHOWN_ONCE.format(name=obj.name, value=created.value), messages.WARNING
            )

    def delete_view(self, request, object_id, extra_context=None):
        # Asked before the confirmation page: the service refuses again under the row lock.
        unsent = destination_unsent_count(destination_id=int(object_id)) if str(object_id).isdigit() else 0
        if unsent:
            self.message_user(
                request,
                f"This destination still has {unsent} deliveries to send: disable it and let them finish "
                "before deleting it.",
                messages.ERROR,
            )
            return HttpResponseRedirect(reverse("admin:delivery_destination_change", args=[object_id]))
        return super().delete_view(request, object_id, extra_context)

    def delete_model(self, request, obj):
        services.destination_delete(destination=obj, operator=request.user.get_username())

    # --- actions ---------------------------------------------------------------------

    @admin.action(description="Send a test message to the selected destinations", permissions=["change"])
    def send_test(self, request, queryset):
        operator = request.user.get_username()
        # Side by side: the page waits for the slowest receiver, at most its timeout.
        for result in destinations_send_test(destinations=list(queryset), operator=operator):
            self.log_change(
                request,
                result.destination,
                f"Test message {result.message_id} sent by operator {operator}: "
                f"{result.status_code if result.status_code is not None else result.error}.",
            )
            self.message_user(
                request,
                f"Test message to {result.destination.name}: {result.describe()}",
                messages.SUCCESS if result.ok else messages.ERROR,
            )

    def _posted_destination(self, request, object_id) -> Destination | HttpResponse:
        """The destination a change-page button acts on, or the answer that refuses it.

        A POST only (admin_view adds the CSRF check): a prefetch or a crawler following a link does nothing.
        """
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        destination = self.get_object(request, unquote(object_id))
        if destination is None:
            # Django's own (ModelAdmin.change_view uses it); missing from django-stubs.
            return self._get_obj_does_not_exist_redirect(request, self.opts, object_id)  # type: ignore[attr-defined]
        if not self.has_change_permission(request, destination):
            raise PermissionDenied
        return destination

    def send_test_view(self, request, object_id):
        """The change page's button: a test message to this destination, its answer in the page's messages."""
        destination = self._posted_destination(request, object_id)
        if isinstance(destination, HttpResponse):
            return destination
        self.send_test(request, Destination.objects.filter(pk=destination.pk))
        return HttpResponseRedirect(reverse("admin:delivery_destination_change", args=[destination.pk]))

    def reveal_url_view(self, request, object_id):
        """The change page's "Reveal the URL": the whole receiver URL, for an operator who may change it.

        A POST (a link followed by a prefetch or a crawler reveals nothing), answered with a page of its own,
        never cached and never put in the session's messages: the URL is a credential, and a message would
        keep it in the session store. The reveal is logged (who, which destination), never the URL.
        """
        destination = self._posted_destination(request, object_id)
        if isinstance(destination, HttpResponse):
            return destination
        url = services.destination_url_reveal(destination=destination, operator=request.user.get_username())
        return self._shown_once(
            request,
            destination,
            template="url.html",
            crumb="Receiver URL",
            input_id="destination-url",
            url=url,
        )

    def _shown_once(
        self, request, destination: Destination, *, template: str, crumb: str, input_id: str, url: str
    ) -> TemplateResponse:
        """A credential of the destination shown whole on a page of its own (shown_once.html), never cached."""
        response = TemplateResponse(
            request,
            f"admin/delivery/destination/{template}",
            {
                **self.admin_site.each_context(request),
                "opts": self.opts,
                "original": destination,
                "title": f"{crumb} of {destination.name}",
                "crumb": crumb,
                "input_id": input_id,
                "url": url,
            },
        )
        add_never_cache_headers(response)
        return response

    def calendar_feed_view(self, request, object_id):
        """The change page's "Issue a calendar feed" (its address shown on this page, once, never cached) and
        "Revoke the calendar feed". Issuing again replaces the address: the one before stops working."""
        destination = self._posted_destination(request, object_id)
        if isinstance(destination, HttpResponse):
            return destination
        if request.POST.get("action") == "revoke":
            if calendar_feed_revoke(destination=destination):
                self.message_user(
                    request, f"The calendar feed of {destination.name} is revoked: its address answers 404."
                )
            return HttpResponseRedirect(reverse("admin:delivery_destination_change", args=[destination.pk]))
        token = calendar_feed_issue(
            destination=destination, operator=request.user.get_username(), now=timezone.now()
        )
        return self._shown_once(
            request,
            destination,
            template="calendar_feed.html",
            crumb="Calendar feed",
            input_id="calendar-feed-url",
            url=request.build_absolute_uri(reverse("calendar-feed", kwargs={"token": token})),
        )

    @admin.action(
        description="Rotate the signing secret of the selected destinations", permissions=["change"]
    )
    def rotate_secret(self, request, queryset):
        operator = request.user.get_username()
        for destination in queryset:
            rotated = services.destination_rotate_secret(destination=destination, operator=operator)
            self.log_change(request, destination, f"Signing secret rotated by operator {operator}.")
            self.message_user(
                request,
                SECRET_SHOWN_ONCE.format(name=destination.name, value=rotated.value),
                messages.WARNING,
            )

    @admin.action(
        description="Stop signing with the previous secrets now (end the grace period)",
        permissions=["change"],
    )
    def drop_previous_secrets(self, request, queryset):
        operator = request.user.get_username()
        for destination in queryset:
            dropped = services.destination_drop_previous_secrets(destination=destination, operator=operator)
            self.log_change(
                request, destination, f"{dropped} previous secrets dropped by operator {operator}."
            )
        self.message_user(request, "Only the newest secret signs from now on.", messages.SUCCESS)

    pause, resume = widgets.pause_resume_actions(
        pause=services.destination_pause,
        resume=services.destination_resume,
        kwarg="destination",
        described=("Pause the selected destinations", "Resume the selected destinations"),
    )


def endpoint_state_badge_of(*, destination: Destination, health: DestinationHealth):
    """Its URL's endpoint state (what the workers see), as on the Endpoints page."""
    endpoint = destination_endpoints(destinations=[destination]).get(destination.url_key)
    if endpoint is None:
        return widgets.badge("stopped", f"{EndpointState(health.endpoint_state).label} (nothing sent yet)")
    return endpoint_state_badge(endpoint)
