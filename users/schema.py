"""The OpenAPI description of the recipients API: what each operation does, takes and answers.

The serializers describe the fields (their help_text) and config.openapi the errors
every operation shares; this adds what is particular to these operations. Applied
to UserViewSet as the decorator `user_schema` (which imports this module, and so
registers the serializer extension too).
"""

from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)

from config.openapi import IF_MATCH, etag_header
from users.serializers import EventSerializer, PersonalLinkSerializer, UserSerializer


class UserSerializerSchema(OpenApiSerializerExtension):
    target_class = UserSerializer

    def map_serializer(self, auto_schema, direction):
        schema = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        if direction == "request":
            # The serializer refuses a field it does not know (400) instead of ignoring it.
            schema["additionalProperties"] = False
        else:
            # A request may leave the optional fields out; a response always has
            # every field, null where the recipient has no value.
            schema["required"] = sorted(schema["properties"])
        return schema


RESCHEDULING = (
    "The next events follow the new data at once: a new date of birth (or anniversary "
    "date) replaces the pending birthday (or anniversary) event with the new next "
    "occurrence (today's, due at once, if its send time passed within the catch-up window "
    "and it was not sent); a first anniversary_date schedules an anniversary event, and null "
    "removes the pending one; a new time zone keeps each occurrence date (and "
    "idempotency key) and moves the send time, due at once if it has passed; a new name "
    "changes no event (the message is rendered when it is sent). An event already being "
    "sent is left as it is. Send the ETag you read in If-Match so that an edit made "
    "meanwhile by someone else is not overwritten."
)

NEW_RECIPIENT = OpenApiExample(
    "A recipient",
    value={
        "first_name": "Ada",
        "last_name": "Lovelace",
        "date_of_birth": "1990-12-10",
        "timezone": "Europe/London",
        "external_id": "crm-1042",
        "anniversary_date": "2015-06-20",
        "labels": ["team:platform", "office:london"],
        "language": "en-GB",
    },
    request_only=True,
)

# The person's say: a birthday without its year, celebrated privately.
PRIVATE_RECIPIENT = OpenApiExample(
    "A birthday without its year, celebrated privately",
    value={
        "first_name": "Ada",
        "last_name": "Lovelace",
        "date_of_birth": "--12-10",
        "timezone": "Europe/London",
        "visibility": {"BIRTHDAY": "private"},
        "hide_age": True,
    },
    request_only=True,
)

REQUIRED_FIELDS = (
    "first_name, last_name, date_of_birth and timezone are required; external_id (400 if "
    "another recipient holds it), anniversary_date, send_time, labels, language, paused, hide_age and "
    "visibility are optional; any other field is refused. date_of_birth may be --MM-DD (no year: no age "
    "is ever said). visibility (public, private, none per event type) and hide_age are the person's "
    "choices: each change is recorded with who made it and when (the export's celebration_changes)."
)

EXTERNAL_ID_FILTER = OpenApiParameter(
    "external_id",
    OpenApiTypes.STR,
    OpenApiParameter.QUERY,
    description=(
        "Only the recipient holding this external id (surrounding whitespace is ignored): "
        "a list of one, or of none if nobody holds it."
    ),
)

LABEL_FILTER = OpenApiParameter(
    "label",
    OpenApiTypes.STR,
    OpenApiParameter.QUERY,
    many=True,
    explode=True,
    description=(
        "Only the recipients holding this label (in any case, e.g. team:platform); given more "
        "than once (`?label=team:platform&label=office:berlin`), only those holding every one."
    ),
)

user_schema = extend_schema_view(
    list=extend_schema(
        summary="List recipients",
        description="All recipients, oldest first, each with their next events.",
        parameters=[EXTERNAL_ID_FILTER, LABEL_FILTER],
    ),
    create=extend_schema(
        summary="Create a recipient",
        description=(
            "Creates the recipient and, in the same transaction, their next birthday "
            "event (`next_event`) and, with an anniversary_date, their next anniversary "
            "event (both in `next_events`). A recipient created on their birthday after its "
            "send time, but within the catch-up window (EVENT_CATCH_UP_WINDOW, 12 hours by "
            "default), gets that day's message at once: its event is the day's, already due. "
            f"{REQUIRED_FIELDS}"
        ),
        parameters=[etag_header(201)],
        examples=[NEW_RECIPIENT, PRIVATE_RECIPIENT],
    ),
    retrieve=extend_schema(summary="Read a recipient", parameters=[etag_header(200)]),
    update=extend_schema(
        summary="Replace a recipient",
        description=f"{REQUIRED_FIELDS} {RESCHEDULING}",
        parameters=[IF_MATCH, etag_header(200)],
        examples=[NEW_RECIPIENT],
    ),
    partial_update=extend_schema(
        summary="Change some of a recipient's fields",
        description=f"Only the fields sent change. {RESCHEDULING}",
        parameters=[IF_MATCH, etag_header(200)],
        examples=[OpenApiExample("A move to Tokyo", value={"timezone": "Asia/Tokyo"}, request_only=True)],
    ),
    destroy=extend_schema(
        summary="Erase a recipient",
        description=(
            "Deletes every copy of the recipient's personal data, in one transaction: the "
            "recipient, their events, their deliveries (the rendered messages) and the "
            "receiver's answers kept with each attempt, and the console's log of them. What "
            "stays names no one: each attempt's times, outcome and HTTP status (for the "
            "metrics, until the history retention), and, for a recipient with an external_id, "
            "a keyed digest of it with the day of each message already sent, for a day or two, "
            "so that the recipient created again that day is not greeted twice. A message "
            "being sent at that moment is cancelled: it may still reach the receiver, and "
            "nothing of it is recorded. Read GET /users/{id}/export/ first for a copy of what "
            "is erased."
        ),
        parameters=[IF_MATCH],
    ),
    export=extend_schema(
        summary="Export everything stored about a recipient",
        description=(
            "Every column of the recipient's row, of each of their events, deliveries (with the "
            "rendered message) and delivery attempts (with the receiver's answers), and the "
            "console's log of them, as stored: the answer to a request for access to one's "
            "personal data. Needs the `view event` and `view delivery` permissions as well as "
            "`view recipient`."
        ),
        responses=OpenApiResponse(
            response=OpenApiTypes.OBJECT,
            description=(
                "`recipient`, `events` (each with its `console_log`), `deliveries` (each with every "
                "column, `attempts` its count, and its attempts under `attempt_log` (a success recorded on its "
                "delivery with `id` null), and its "
                "`console_log`), `console_log` and `exported_at`. Sent with `Cache-Control: no-store`."
            ),
        ),
    ),
    personal_link=extend_schema(
        summary="Issue a link to the recipient's own page",
        description=(
            "A new signed link to the person's own page (where they see what is stored about them and "
            "where and when they will be greeted, choose their visibility, hide their age, set their "
            "language, send time, chat identities and mentions, leave shared destinations, and download "
            "their data), for the operator or an HR system to send them. The URL is in this answer "
            "only: it is not stored and cannot be read again. It opens the page until `expires_at` "
            "(PERSONAL_LINK_MAX_AGE_DAYS after now); issuing another ends it at once. Needs the "
            "`change recipient` permission. No body."
        ),
        request=None,
        responses={
            201: OpenApiResponse(
                response=PersonalLinkSerializer,
                description="The link, once. Sent with `Cache-Control: no-store`.",
            )
        },
    ),
    events=extend_schema(
        summary="List a recipient's events",
        description=(
            "Every event of the recipient's that was scheduled (birthdays and wedding "
            "anniversaries), newest first: the pending ones, and what became of each "
            "earlier one. Needs the `view event` permission as well as `view recipient`."
        ),
        responses=EventSerializer(many=True),
    ),
)
