"""Deliveries in the operator console: read-only; the one write is the Resend action."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import Exists, OuterRef, Q
from django.urls import reverse
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.html import format_html, format_html_join

from console import confirm, widgets
from console.admin.endpoints import endpoint_state_badge
from console.pagination import BoundedListAdmin
from delivery.actions.resend import delivery_resend
from delivery.models import AttemptOutcome, Delivery, DeliveryAttempt, DeliveryStatus, Endpoint
from delivery.rules import failure_causes as failures
from delivery.rules.attempt_words import AttemptCount, attempt_label
from delivery.rules.digest_calendar import KEY_PREFIX as DIGEST_KEY_PREFIX
from delivery.selectors import SUCCESS_ON_DELIVERY, attempts_not_counted, delivery_attempts
from kinds import STANDARD


class AttemptOutcomeFilter(admin.SimpleListFilter):
    """Deliveries with at least one attempt of the chosen outcome."""

    title = "had an attempt that was"
    parameter_name = "attempt_outcome"

    def lookups(self, request, model_admin):
        return AttemptOutcome.choices

    def queryset(self, request, queryset):
        if self.value() in AttemptOutcome.values:
            had = Q(Exists(DeliveryAttempt.objects.filter(delivery=OuterRef("pk"), outcome=self.value())))
            if self.value() == AttemptOutcome.DELIVERED:
                # A success recorded on its delivery has no attempt row (delivery.selectors.delivery_attempts).
                had |= SUCCESS_ON_DELIVERY
            return queryset.filter(had)
        return queryset


class KindFilter(admin.SimpleListFilter):
    """An occurrence's deliveries, or the daily digests' (delivery_event_or_digest: one or the other)."""

    title = "sends"
    parameter_name = "kind"

    def lookups(self, request, model_admin):
        return [("occurrence", "One occurrence"), ("digest", "A daily digest")]

    def queryset(self, request, queryset):
        if self.value() == "digest":
            return queryset.filter(digest__isnull=False)
        if self.value() == "occurrence":
            return queryset.filter(digest__isnull=True)
        return queryset


class LeaseFilter(widgets.DeadlineFilter):
    """SENDING rows whose lease has run out: their worker is gone; a worker will take them back."""

    title = "lease"
    parameter_name = "lease"
    status, deadline = Delivery.Status.SENDING, "locked_until"
    passed, ahead = "expired", "held"

    def lookups(self, request, model_admin):
        return [("held", "Held by a worker"), ("expired", "Expired (worker lost)")]


def _attempt_rows(delivery: Delivery):
    """A delivery's attempts, newest first, as table rows: number, outcome, status, duration, start, worker,
    error, response (the columns the console always showed an attempt with)."""
    attempts = delivery_attempts(delivery_ids=[delivery.pk]).get(delivery.pk, [])
    return format_html_join(
        "",
        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{} ms</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
        (
            (
                a["number"],
                # By what the attempt led to (tried again, held, given up), not by its delivery's final state.
                widgets.badge(
                    a["outcome"],
                    attempt_label(
                        outcome=a["outcome"],
                        status_code=a["status_code"],
                        counted=a["counted"],
                        status_after=a["delivery_status_after"],
                    ),
                ),
                a["status_code"] if a["status_code"] is not None else "—",
                a["duration_ms"],
                date_format(timezone.localtime(a["started_at"]), "DATETIME_FORMAT"),
                a["worker"] or "—",
                a["error"] or "—",
                _response(a["response_excerpt"]),
            )
            for a in reversed(attempts)
        ),
    )


def _response(excerpt: str):
    if not excerpt:
        return "—"
    return format_html(
        '<code style="white-space:pre-wrap;word-break:break-all">{}</code>',
        excerpt[:300] + ("…" if len(excerpt) > 300 else ""),
    )


def _is_chat(delivery: Delivery) -> bool:
    """Whether the delivery goes to a chat service's webhook (Slack, Discord, Teams), not a standard receiver."""
    return delivery.destination is not None and delivery.destination.format != STANDARD.name


def status_chosen(request) -> bool:
    """Whether the list is narrowed to one status (by its filter, or the lease one, which means SENDING)."""
    return request.GET.get("status__exact") in DeliveryStatus.values or request.GET.get("lease") in (
        "held",
        "expired",
    )


def _digest_said(delivery: Delivery) -> str:
    """A digest's delivery names no one event: its date and how many it names."""
    digest = delivery.digest
    if digest is None:
        return "-"
    named = len(digest.entries)
    if digest.first_date == digest.last_date == digest.local_date:
        dates = f"{digest.local_date}"
    elif digest.first_date == digest.last_date:
        dates = f"{digest.local_date} (names {digest.first_date})"  # ahead of the day
    else:
        dates = f"{digest.local_date} (names {digest.first_date} to {digest.last_date})"
    # A weekly digest's period is its ISO week (delivery.rules.digest_calendar.digest_period).
    every = "Weekly" if "-W" in digest.period else "Daily"
    return f"{every} digest of {dates}: {named} occurrence{'s' if named != 1 else ''}"


@admin.register(Delivery)
class DeliveryAdmin(widgets.ViewOnlyPageMixin, BoundedListAdmin):
    # Nothing on a delivery is edited by hand.
    # What an operator triages by first (status, when, the error), the key under the recipient, so
    # the row fits a laptop's width (console/tests/test_browser_layout.py holds it to that).
    list_display = [
        "recipient",
        "destination",
        "status_badge",
        "attempts_used",
        "last_status_code",
        "last_error_short",
        "when",
        "lease",
    ]
    list_select_related = ["event__user", "destination", "digest"]
    list_filter = ["status", KindFilter, LeaseFilter, AttemptOutcomeFilter]
    # Matched exactly (an indexed lookup) in get_search_results; listing the
    # field here is what shows the search box.
    search_fields = ["=event__idempotency_key"]
    search_help_text = "An idempotency key (event-… or digest-…), a delivery id or an event id."
    list_per_page = 50
    actions = ["resend"]
    fieldsets = [
        (
            None,
            {
                "fields": [
                    "id",
                    "idempotency_key",
                    "event_link",
                    "destination",
                    "status_badge",
                    "attempts_used",
                    "endpoint_link",
                ]
            },
        ),
        (
            "Schedule and lease",
            {"fields": ["next_attempt", "locked_by", "locked_until", "attempt_started_at"]},
        ),
        (
            "Outcome",
            {
                "fields": [
                    "last_status_code",
                    "last_error",
                    "what_to_do",
                    "delivered_at",
                    "created_at",
                    "updated_at",
                ]
            },
        ),
        ("Request", {"classes": ["collapse"], "fields": ["payload"]}),
        # Read through delivery.selectors.delivery_attempts, as the export reads them: a success recorded on
        # its delivery has no attempt row, and an inline of the rows would leave it out.
        ("Attempts", {"fields": ["attempt_log"]}),
    ]

    def has_add_permission(self, request):
        # Deliveries are queued by the scheduler when it claims an event.
        return False

    def has_delete_permission(self, request, obj=None):
        # Never: deleting a delivery would erase its attempt log and let the
        # occurrence be queued again under the same key.
        return False

    def get_ordering(self, request):
        # In one status (the lease filter means SENDING), last changed first:
        # a backward scan of (status, updated_at). Across statuses, newest
        # first by the key, which is time-ordered (uuid7): the model's
        # -created_at, read from the primary key instead of sorting the table.
        return ["-updated_at"] if status_chosen(request) else ["-id"]

    def get_sortable_by(self, request):
        # Only what an index serves in either direction, within one status.
        return ["updated_at"] if status_chosen(request) else []

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()
        as_uuid = widgets.parse_uuid(term)
        if as_uuid is not None:
            return queryset.filter(Q(id=as_uuid) | Q(event_id=as_uuid)), False
        if term.startswith(DIGEST_KEY_PREFIX):
            # Through the digest, whose key is indexed too.
            return queryset.filter(digest__idempotency_key=term), False
        if term:
            # Through the event, whose key is indexed (the delivery's copy is not).
            return queryset.filter(event__idempotency_key=term), False
        return queryset, False

    # --- columns ------------------------------------------------------------------

    @admin.display(description="recipient and key")
    def recipient(self, delivery: Delivery):
        if delivery.event is None:
            return _digest_said(delivery)
        return format_html(
            '<a href="{}">{}</a><br><a class="bs-muted" href="{}">{}</a>',
            reverse("admin:delivery_delivery_change", args=[delivery.pk]),
            delivery.event.user,
            reverse("admin:scheduling_event_change", args=[delivery.event_id]),
            delivery.idempotency_key,
        )

    @admin.display(description="when", ordering="updated_at")
    def when(self, delivery: Delivery):
        # A QUEUED delivery's next try is what matters; for the others, when they got where they are.
        if delivery.status == DeliveryStatus.QUEUED:
            return format_html(
                '<span class="bs-muted">next try</span> {}', widgets.when(delivery.next_attempt_at)
            )
        return widgets.when(delivery.updated_at)

    @admin.display(description="event")
    def event_link(self, delivery: Delivery):
        if delivery.event is None:
            return _digest_said(delivery)
        return format_html(
            '<a href="{}">{}</a> for {}',
            reverse("admin:scheduling_event_change", args=[delivery.event_id]),
            delivery.event,
            delivery.event.user,
        )

    @admin.display(description="endpoint")
    def endpoint_link(self, delivery: Delivery):
        # A QUEUED delivery whose endpoint is failing or paused waits for it: say so here.
        endpoint = Endpoint.objects.filter(key=delivery.endpoint_key).first()
        if endpoint is None:
            # Its destination's URL changed since, or the destination was deleted: that receiver is gone.
            return "— (a receiver no destination has any more)"
        return format_html(
            '<a href="{}">{}</a> {}',
            reverse("admin:delivery_endpoint_change", args=[endpoint.pk]),
            endpoint.url_display,
            endpoint_state_badge(endpoint),
        )

    @admin.display(description="attempts, newest first")
    def attempt_log(self, delivery: Delivery):
        rows = _attempt_rows(delivery)
        if not rows:
            return "—"
        return format_html(
            '<div style="overflow-x:auto"><table><thead><tr><th>number</th><th>outcome</th><th>status code</th>'
            "<th>duration</th><th>started at</th><th>worker</th><th>error</th><th>response (excerpt)</th></tr>"
            "</thead><tbody>{}</tbody></table></div>",
            rows,
        )

    @admin.display(description="status", ordering="status")
    def status_badge(self, delivery: Delivery):
        return widgets.badge(delivery.status, delivery.get_status_display())

    def get_queryset(self, request):
        # Each row's attempts that cost none of its budget, for "n of max".
        return super().get_queryset(request).annotate(attempts_not_counted=attempts_not_counted())

    @admin.display(description="attempts", ordering="attempts")
    def attempts_used(self, delivery: Delivery):
        return widgets.attempts(
            AttemptCount(
                made=delivery.attempts,
                not_counted=getattr(delivery, "attempts_not_counted", 0),
                max_attempts=delivery.max_attempts,
            )
        )

    @admin.display(description="next attempt")
    def next_attempt(self, delivery: Delivery):
        # Only a delivery still to be sent has one: a dead or delivered one has none, whatever the column holds.
        if delivery.status == DeliveryStatus.DEAD:
            return "None: it is dead (Resend queues it again)"
        if delivery.status == DeliveryStatus.DELIVERED:
            return "None: it was delivered"
        return widgets.when(delivery.next_attempt_at)

    @admin.display(description="what to do")
    def what_to_do(self, delivery: Delivery) -> str:
        if delivery.status == DeliveryStatus.DELIVERED or (
            not delivery.last_error and delivery.last_status_code is None
        ):
            return "—"
        cause = failures.cause_of(status_code=delivery.last_status_code, error=delivery.last_error)
        return failures.cause_hint(cause, chat=_is_chat(delivery))

    @admin.display(description="lease (worker, until)")
    def lease(self, delivery: Delivery):
        if not delivery.locked_by:
            return "—"
        expired = delivery.locked_until and delivery.locked_until < timezone.now()
        return format_html(
            '{}<br><span class="{}">{}{}</span>',
            delivery.locked_by,
            "bs-late" if expired else "bs-muted",
            widgets.when(delivery.locked_until),
            " (expired)" if expired else "",
        )

    @admin.display(description="last error")
    def last_error_short(self, delivery: Delivery) -> str:
        # In words, by its class (delivery.rules.failure_causes); the receiver's own answer is on the attempt rows.
        if not delivery.last_error and delivery.last_status_code is None:
            return "—"
        if delivery.status == DeliveryStatus.DELIVERED:
            return "—"
        return failures.cause_label(
            failures.cause_of(status_code=delivery.last_status_code, error=delivery.last_error)
        )

    # --- actions ------------------------------------------------------------------

    @admin.action(description="Resend selected DEAD deliveries…", permissions=["change"])
    def resend(self, request, queryset):
        return confirm.confirmed_first(
            self,
            request,
            queryset.select_related("destination"),
            title="Resend these dead deliveries?",
            consequence=(
                "Each dead delivery is queued again to its destination, under the same idempotency key, "
                "with a fresh budget of attempts: the receiver gets the greeting late. Its event is "
                "processing again until the delivery ends."
            ),
            button="Yes, resend them",
            item=_resend_item,
            run=lambda rows: widgets.run_operator_action(
                self, request, rows, service=delivery_resend, verb="Resend", kwarg="delivery"
            ),
        )


def _resend_item(delivery: Delivery) -> confirm.Item:
    return confirm.Item(
        label=(
            f"{delivery.idempotency_key} to "
            f"{delivery.destination.name if delivery.destination else 'a deleted destination'}"
        ),
        refusal="" if delivery.status == DeliveryStatus.DEAD else f"it is {delivery.get_status_display()}",
    )
