"""The OpenAPI description of the destinations API, beside the serializers' field help (config.openapi adds
the errors every operation shares). Applied to DestinationViewSet as the decorator `destination_schema`."""

from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema, extend_schema_view

from config.openapi import IF_MATCH, ErrorSerializer, etag_header
from delivery.api import serializers

NEW_DESTINATION = OpenApiExample(
    "The team's Slack channel, birthdays only",
    value={
        "name": "team-slack",
        "url": "https://hooks.slack.com/services/T000/B000/XXXX",
        "event_types": ["BIRTHDAY"],
        "format": "slack",
    },
    request_only=True,
)
TEAM_CHANNEL = OpenApiExample(
    "The platform team's channel: its people only, in its own words",
    value={
        "name": "platform-slack",
        "url": "https://hooks.slack.com/services/T000/B001/YYYY",
        "event_types": ["BIRTHDAY"],
        "audience_labels": ["team:platform"],
        "excluded_labels": ["contractor"],
        "message_overrides": {"BIRTHDAY": "🎂 Happy birthday, {first_name}!"},
        "format": "slack",
    },
    request_only=True,
)
DAILY_DIGEST = OpenApiExample(
    "The Berlin office's channel: one message a day at 09:30, weekends on the Friday before",
    value={
        "name": "berlin-teams",
        "url": "https://prod-00.westeurope.logic.azure.com/workflows/abc/triggers/manual/paths/invoke?sig=ZZZZ",
        "audience_labels": ["office:berlin"],
        "format": "teams",
        "digest_time": "09:30",
        "digest_timezone": "Europe/Berlin",
        "weekend": "FRIDAY_BEFORE",
    },
    request_only=True,
)
WEEKLY_AHEAD = OpenApiExample(
    "The Munich office's channel: on Mondays, in German, the week after next",
    value={
        "name": "munich-slack",
        "url": "https://hooks.slack.com/services/T000/B002/ZZZZ",
        "audience_labels": ["office:munich"],
        "format": "slack",
        "digest_time": "09:00",
        "digest_timezone": "Europe/Berlin",
        "digest_weekday": "MONDAY",
        "digest_days_ahead": 7,
        "digest_language": "de",
    },
    request_only=True,
)
CREATED = OpenApiExample(
    "Created, with its secret shown this once",
    value={
        "id": 3,
        "name": "crm",
        "url": "https://crm.example.org/…",
        "event_types": ["BIRTHDAY"],
        "audience_labels": [],
        "excluded_labels": [],
        "message_overrides": {},
        "format": "standard",
        "enabled": True,
        "max_rate": 1.0,
        "max_in_flight": None,
        "timeout": None,
        "digest_time": None,
        "digest_timezone": "",
        "weekend": "ON_THE_DAY",
        "digest_days_ahead": 0,
        "digest_weekday": None,
        "digest_language": "en",
        "next_digest_date": None,
        "next_digest_at": None,
        "next_digest_local": None,
        "secrets": [{"hint": "whsec_q2Vd…", "created_at": "2026-11-26T08:00:00Z", "expires_at": None}],
        "paused": False,
        "endpoint_state": "HEALTHY",
        "created_by": "ops-alice",
        "updated_by": "ops-alice",
        "created_at": "2026-11-26T08:00:00Z",
        "updated_at": "2026-11-26T08:00:00Z",
        "version": 1,
        "secret": "whsec_q2Vd0c3rR0kP8nY5uWm0K3b8eXhI1tqO6o2QmJxkR2A=",
    },
    response_only=True,
    status_codes=["201"],
)
RECEIVER_FAILED = OpenApiExample(
    "The receiver answered 500",
    value={
        "status_code": 500,
        "ok": False,
        "latency_ms": 41,
        "body_start": "upstream unavailable",
        "error": "Internal Server Error",
        "refused": False,
        "message_id": "test-5f0c7d3e9a2b4c1d8e6f0a1b2c3d4e5f",
    },
    response_only=True,
)
REFUSED = OpenApiExample(
    "Its address is refused (no request made)",
    value={
        "status_code": None,
        "ok": False,
        "latency_ms": 0,
        "body_start": "",
        "error": "Refused: hooks.internal at 10.0.0.5 is a private address (WEBHOOK_ALLOWED_NETWORKS)",
        "refused": True,
        "message_id": "test-0a1b2c3d4e5f60718293a4b5c6d7e8f9",
    },
    response_only=True,
)
IN_USE = OpenApiResponse(
    ErrorSerializer,
    "It still has deliveries to send (disable it and let them finish first), or it is already paused / not "
    "paused. Nothing changed.",
)
EDITS = (
    "Send the ETag you read in If-Match so that a change made meanwhile by someone else is not overwritten. "
    "Takes effect on every worker within seconds. A new URL takes the deliveries not yet delivered with it; "
    "a paused destination stays paused under its new URL; a new format or set of event types applies to "
    "occurrences claimed from now on. `url` left out, or given back as answered (redacted), keeps the URL. "
    "A secret cannot be changed here: use rotate-secret."
)

destination_schema = extend_schema_view(
    list=extend_schema(summary="List destinations", description="Every destination, by name."),
    retrieve=extend_schema(summary="Read a destination", parameters=[etag_header(200)]),
    create=extend_schema(
        summary="Create a destination",
        description=(
            "name and url are required. The answer carries its signing secret in `secret`: the only time it "
            "is ever shown (afterwards only its hint). Give `secret` to use one of your own."
        ),
        parameters=[etag_header(201)],
        examples=[NEW_DESTINATION, TEAM_CHANNEL, DAILY_DIGEST, WEEKLY_AHEAD, CREATED],
    ),
    update=extend_schema(
        summary="Replace a destination's settings",
        description=EDITS,
        parameters=[IF_MATCH, etag_header(200)],
        request=serializers.DestinationUpdateSerializer,
        responses={200: serializers.DestinationSerializer},
    ),
    partial_update=extend_schema(
        summary="Change some of a destination's settings",
        description=EDITS,
        parameters=[IF_MATCH, etag_header(200)],
        request=serializers.DestinationUpdateSerializer,
        responses={200: serializers.DestinationSerializer},
        examples=[OpenApiExample("Switch it off", value={"enabled": False}, request_only=True)],
    ),
    destroy=extend_schema(
        summary="Delete a destination",
        description="Its delivered history stays, without a destination. Refused (409) while it has deliveries "
        "to send.",
        parameters=[IF_MATCH],
        responses={204: None, 409: IN_USE},
    ),
    rotate_secret=extend_schema(
        summary="Rotate a destination's signing secret",
        description=(
            "Adds a new secret, shown in this answer only. The previous ones keep signing beside it (several "
            "signatures in webhook-signature) for DESTINATION_SECRET_GRACE (24 h by default), then are dropped."
        ),
        request=serializers.RotateSecretSerializer,
        responses={200: serializers.NewSecretSerializer},
    ),
    reveal_url=extend_schema(
        summary="Reveal a destination's whole receiver URL",
        description=(
            "Every other answer shows the URL redacted (scheme and host): a chat webhook's URL is the credential "
            "that posts to it. This one shows it whole, to a caller allowed to change the destination "
            "(delivery.change_destination), and is logged (who, which destination; never the URL). Not cached."
        ),
        request=None,
        responses={200: serializers.RevealedUrlSerializer},
    ),
    calendar_feed=[
        extend_schema(
            methods=["POST"],
            summary="Issue a destination's calendar feed",
            description=(
                "Answers the feed's URL, the only time it is shown (only its hash is kept); a URL issued before "
                "stops working. The feed lists the coming 12 months of the celebrations the destination may "
                "announce, as all-day events."
            ),
            request=None,
            responses={201: serializers.CalendarFeedSerializer},
        ),
        extend_schema(
            methods=["DELETE"],
            summary="Revoke a destination's calendar feed",
            description="Its URL answers 404 from now on; 404 here if it has none.",
            request=None,
            responses={204: None, 404: ErrorSerializer},
        ),
    ],
    pause=extend_schema(
        summary="Pause a destination",
        description="Its deliveries wait QUEUED, without spending attempts, until resumed.",
        request=None,
        responses={200: serializers.DestinationSerializer, 409: IN_USE},
    ),
    resume=extend_schema(
        summary="Resume a paused destination",
        description="Its waiting deliveries go out in due order.",
        request=None,
        responses={200: serializers.DestinationSerializer, 409: IN_USE},
    ),
    test=extend_schema(
        summary="Send a test message to a destination",
        description=(
            "Sends one test message now and answers what the receiver did. It goes in the destination's format, "
            "signed with its secrets in force (Standard Webhooks headers), with a message id of its own (in the "
            "standard format, event_type `destination.test`). It is not a delivery: nothing is recorded or "
            "counted, the endpoint's health does not move, and it goes even to a paused or disabled destination. "
            "The request waits for the answer, at most the destination's timeout (25 s at most). An address the "
            "workers would refuse is refused here too, without a request. 200 whatever the receiver answered: "
            "`ok` says whether it accepted (2xx)."
        ),
        request=None,
        responses={200: serializers.PingResultSerializer},
        examples=[RECEIVER_FAILED, REFUSED],
    ),
)

RECOVERY_REFUSED = OpenApiResponse(
    ErrorSerializer,
    "The destination is disabled (enable it first), another recovery of it is under way (one at a time), or "
    "the recovery has already ended. Nothing changed.",
)
RECOVER_LOST_DAY = OpenApiExample(
    "Everything the CRM accepted between Tuesday 08:00 and Wednesday 10:00 (Paris), counted first",
    value={
        "states": ["DELIVERED"],
        "since": "2026-11-24T08:00:00+01:00",
        "until": "2026-11-25T10:00:00+01:00",
        "dry_run": True,
    },
    request_only=True,
)
RECOVERY_PREVIEW = OpenApiExample(
    "The count",
    value={
        "dry_run": True,
        "count": 1234,
        "states": ["DELIVERED"],
        "since": "2026-11-24T07:00:00Z",
        "until": "2026-11-25T09:00:00Z",
    },
    response_only=True,
    status_codes=["200"],
)
RECOVERY_CREATED = OpenApiExample(
    "Recorded, for the workers",
    value={
        "id": 7,
        "destination": 3,
        "states": ["DELIVERED"],
        "since": "2026-11-24T07:00:00Z",
        "until": "2026-11-25T09:00:00Z",
        "status": "PENDING",
        "total": 1234,
        "done": 0,
        "skipped": 0,
        "batches": 0,
        "requested_by": "ops-alice",
        "requested_at": "2026-11-26T10:00:00Z",
        "finished_at": None,
        "updated_at": "2026-11-26T10:00:00Z",
    },
    response_only=True,
    status_codes=["201"],
)

recovery_schema = extend_schema_view(
    list=extend_schema(
        summary="List a destination's recoveries", description="Newest first, with their progress."
    ),
    retrieve=extend_schema(
        summary="Read a recovery's progress",
        description="done and skipped grow a batch at a time while it is RUNNING; FINISHED: done + skipped = total.",
    ),
    create=extend_schema(
        summary="Recover a destination's deliveries (or count them first)",
        description=(
            "Every delivery of this destination in `states` (DEAD, DELIVERED or both) that reached that state "
            "in [since, until), and before this request, is queued again, each under its own idempotency key, "
            "with a fresh budget of attempts, to the destination's URL and in its format as they are now; "
            "their events are PROCESSING again until their deliveries end. With `dry_run` the answer is only the "
            "count (200); without, the recovery is recorded with that count as its total (201) and the workers "
            "carry it out in batches: follow it with GET. Instants need their UTC offset. One recovery at a "
            "time per destination; a paused destination's deliveries wait for its resume."
        ),
        request=serializers.RecoveryRequestSerializer,
        responses={
            200: serializers.RecoveryPreviewSerializer,
            201: serializers.RecoverySerializer,
            409: RECOVERY_REFUSED,
        },
        examples=[RECOVER_LOST_DAY, RECOVERY_PREVIEW, RECOVERY_CREATED],
    ),
    cancel=extend_schema(
        summary="Cancel a recovery",
        description="No further batch is queued; what was queued again by now still goes.",
        request=None,
        responses={200: serializers.RecoverySerializer, 409: RECOVERY_REFUSED},
    ),
)
