"""The OpenAPI document agrees with the server for every recipient, destination, recovery and upcoming operation.

schemathesis sends what the document allows (each must be accepted, unless a rule
it cannot state refuses it: see `refused_by_a_rule`) and what it forbids (each
must be refused), at real rows: the recipient, destination and recovery the
path names exist, so that reads, edits and actions reach them rather than 404.
"""

import io
import json
import uuid
from datetime import date, timedelta

import pytest
import schemathesis
from django.core.management import call_command
from django.db.models import Q
from django.utils import timezone
from hypothesis import HealthCheck, settings
from rest_framework.authtoken.models import Token
from schemathesis.checks import not_a_server_error
from schemathesis.config import SchemathesisConfig
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    positive_data_acceptance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from config.wsgi import application
from conftest import SUITE_PROFILE
from delivery.credentials.receiver_urls import url_normalise
from delivery.destinations.services import destination_url_fields
from delivery.models import Destination, Recovery, RecoveryStatus
from users.models import User

RECIPIENT_ID = "6f1c0f8e-5a8e-4c57-9d1b-3e2b7f0a9c41"
DESTINATION_NAME = "schema-aimed"
SENT_TO = "http://127.0.0.1:9/schema-aimed"  # a test message there fails at once: nobody listens

pytestmark = pytest.mark.django_db

# The destination the examples are aimed at, by primary key: kept for the whole run.
AIMED: dict[str, int] = {}


def generated_schema() -> dict:
    out = io.StringIO()
    call_command("spectacular", "--format", "openapi-json", stdout=out)
    return json.loads(out.getvalue())


config = SchemathesisConfig()
config.projects.default.phases.coverage.enabled = SUITE_PROFILE != "check"
# What a well-formed request may meet besides success: a row another example deleted (404), a state
# the row is in (409), an If-Match of another version (412).
config.projects.default.checks.positive_data_acceptance.expected_statuses = [
    "2xx",
    "401",
    "403",
    "404",
    "409",
    "412",
]
# What a malformed request may meet besides a 400: the default list, and 412 for an If-Match the document
# forbids (an empty one): RFC 9110 allows an empty list there, which matches no ETag, so the precondition fails.
config.projects.default.checks.negative_data_rejection.expected_statuses = [
    "400",
    "401",
    "403",
    "404",
    "405",
    "406",
    "409",
    "412",
    "415",
    "422",
    "428",
    "429",
    "5xx",
]
api = schemathesis.openapi.from_dict(generated_schema(), config=config).include(
    path_regex=r"^/api/v1/(users|destinations|event-types|upcoming)/"
)


# What the serializers answer when a request's shape is wrong: what the document can and must say
# beforehand (a type, a length, a choice, a field it does not know, one it requires). Any other
# refusal is a rule the document cannot state (a name already taken, a date of birth in the future,
# a receiver behind us): it says so in words of the server's own.
SHAPE_MESSAGES = (
    "Unknown field.",
    "This field is required.",
    "This field may not be null.",
    "This field may not be blank.",
    "Not a valid string.",
    "A valid integer is required.",
    "A valid number is required.",
    "Must be a valid boolean.",
    "is not a valid choice.",
    "Ensure this field has",
    "Ensure this value is",
    "Expected a list of items",
    "This list may not be empty.",
    "has wrong format",
    "Expected a JSON object",
    "Invalid data. Expected a dictionary",
    "JSON parse error",
    "cannot be changed here",
    "is changed with POST",
)


def refused_by_a_rule(response) -> bool:
    """A 400 whose every message is a rule of the server's, none about the request's shape."""
    if response.status_code != 400:
        return False
    try:
        body = response.json()
    except ValueError:
        return False
    messages = [m for value in body.values() for m in (value if isinstance(value, list) else [value])]
    return bool(messages) and not any(
        shape in str(message) for message in messages for shape in SHAPE_MESSAGES
    )


@schemathesis.check
def accepted_unless_refused_by_a_rule(ctx, response, case):
    """positive_data_acceptance, but a rule the document cannot state may refuse a well-formed request."""
    try:
        return positive_data_acceptance(ctx, response, case)
    except AssertionError:
        if refused_by_a_rule(response):
            return None
        raise


def rows_to_aim_at() -> tuple[Destination, Recovery]:
    User.objects.get_or_create(
        id=RECIPIENT_ID,
        defaults={
            "first_name": "Ada",
            "last_name": "Lovelace",
            "date_of_birth": date(1990, 12, 10),
            "timezone": "Europe/London",
        },
    )
    # The examples edit and delete it: each starts from it as it was (one that took its name or URL goes).
    receiver = destination_url_fields(url=url_normalise(SENT_TO))
    settings_of = {"name": DESTINATION_NAME, **receiver, "enabled": True, "timeout": timedelta(seconds=1)}
    aimed = Destination.objects.filter(pk=AIMED.get("destination")).first()
    Destination.objects.filter(Q(name=DESTINATION_NAME) | Q(url_key=receiver["url_key"])).exclude(
        pk=aimed.pk if aimed else None
    ).delete()
    if aimed is None:
        aimed = Destination.objects.create(**settings_of)
        AIMED["destination"] = aimed.pk
    else:
        Destination.objects.filter(pk=aimed.pk).update(**settings_of)
    destination = aimed
    now = timezone.now()
    recovery = Recovery.objects.filter(destination=destination).first() or Recovery.objects.create(
        destination=destination,
        states=["DEAD"],
        since=now - timedelta(days=1),
        until=now,
        requested_by="ops",
        requested_at=now,
        total=1,
    )
    Recovery.objects.filter(pk=recovery.pk).update(status=RecoveryStatus.PENDING, finished_at=None)
    return destination, recovery


def well_formed(value, *, like) -> bool:
    if isinstance(like, int):
        return isinstance(value, int) and not isinstance(value, bool)
    try:
        uuid.UUID(str(value))
    except ValueError:
        return False
    return True


@pytest.fixture
def operator_token(operator) -> str:
    return Token.objects.create(user=operator).key


@api.parametrize()
@settings(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
def test_every_recipient_destination_and_recovery_operation_agrees_with_its_schema(
    case, operator_token, transactional_db
):
    destination, recovery = rows_to_aim_at()
    # Well-formed ids go to the rows above; malformed ones (the negative cases) must still be answered
    # as documented.
    parameters = case.path_parameters or {}
    aimed = (
        {"id": RECIPIENT_ID}
        if case.path.startswith("/api/v1/users/")
        else {"destination_pk": destination.pk, "id": recovery.pk}
        if "destination_pk" in parameters
        else {"id": destination.pk}
    )
    for name, value in aimed.items():
        if name in parameters and well_formed(parameters[name], like=value):
            parameters[name] = value
    case.call_and_validate(
        app=application,
        headers={"Authorization": f"Token {operator_token}"},
        checks=[
            not_a_server_error,
            status_code_conformance,
            content_type_conformance,
            response_headers_conformance,
            response_schema_conformance,
            negative_data_rejection,
            accepted_unless_refused_by_a_rule,
        ],
    )
