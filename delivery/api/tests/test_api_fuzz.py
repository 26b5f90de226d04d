"""Every field of the destination and recipient APIs, fuzzed from the OpenAPI document: never a 5xx.

For each property of each request body the document describes (a destination's and a
recipient's, created and patched), Hypothesis draws values both as the document states
them (its types, patterns, ranges, choices) and as it forbids them (any JSON value, and
strings that once broke a field: a port past 65535, a NUL, a UTC offset, a digest time
written 9.30), puts each into an otherwise valid body, and sends it in-process. Any answer
is fine but a server error: what the document allows is taken or refused by a rule, what it
forbids is a 400 naming the field. Bounded: a fixed number of examples per field, and the
whole run held under a minute.

Not schemathesis's own runner (delivery/api/tests/test_api_schema.py runs that, operation
by operation): here every field is drawn on its own, each many times, which is how a value
one field chokes on (port 99999) is found rather than left to a chance draw among all of them.
"""

from __future__ import annotations

import io
import json
import time
from typing import Any

import pytest
from django.core.management import call_command
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from conftest import SUITE_PROFILE
from delivery.destinations.services import destination_url_fields
from delivery.models import Destination
from users.tests.factories import UserFactory

pytestmark = pytest.mark.django_db

# Examples drawn per field and operation, besides EVERY_FIELD_GETS: make check's loop draws fewer.
EXAMPLES = 3 if SUITE_PROFILE == "check" else 6
# The whole run's bound: what make test may spend on it.
BOUND_SECONDS = 60

# Strings that broke, or could break, a field somewhere: a port out of range, a host that is no host,
# NUL (PostgreSQL refuses it in text), a UTC offset, times and numbers written as people write them.
HOSTILE_STRINGS = [
    "http://127.0.0.1:99999/",
    "https://example.org:0/",
    "https://[::1/",
    "https://exa mple.org/",
    "https://example.org/\x00",
    "\x00",
    "",
    " ",
    "+05:00",
    "UTC+5:45",
    "9.30",
    "24:00",
    "1e309",
    "NaN",
    "-0",
    "team platform",
    "Team:Platform",
    "a" * 5000,
    "ü" * 300,
    "9999-99-99",
    "0000-01-01",
    "1900-01-01",
    "2100-02-29",
]
# What every field is sent besides the drawn values, whatever its type: what broke a field before
# (a URL's port past 65535 answered 500), and a value of each wrong JSON type.
EVERY_FIELD_GETS = ["http://127.0.0.1:99999/", "\x00", [1], 1e308, {}]
ANY_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30)
    | st.sampled_from(HOSTILE_STRINGS),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=8,
)


def openapi() -> dict:
    out = io.StringIO()
    call_command("spectacular", "--format", "openapi-json", stdout=out)
    return json.loads(out.getvalue())


def _resolved(schema: dict, components: dict) -> dict:
    while "$ref" in schema or ("allOf" in schema and len(schema["allOf"]) == 1):
        ref = schema.get("$ref") or schema["allOf"][0].get("$ref")
        if ref is None:
            schema = {**schema["allOf"][0], **{k: v for k, v in schema.items() if k != "allOf"}}
            continue
        schema = {
            **components[ref.rsplit("/", 1)[1]],
            **{k: v for k, v in schema.items() if k not in ("$ref", "allOf")},
        }
    return schema


def as_documented(schema: dict, components: dict) -> st.SearchStrategy[Any]:
    """Values of the type, pattern, range and choices `schema` (an OpenAPI 3.0 schema) states."""
    schema = _resolved(schema, components)
    options: list[st.SearchStrategy[Any]] = []
    if "oneOf" in schema:
        options += [as_documented(each, components) for each in schema["oneOf"]]
    if "enum" in schema:
        options.append(st.sampled_from([value for value in schema["enum"] if value is not None] or [None]))
    kind = schema.get("type")
    if kind == "string" and "enum" not in schema:
        longest = schema.get("maxLength", 200)
        if "pattern" in schema:
            options.append(
                st.from_regex(schema["pattern"], fullmatch=True).filter(lambda s: len(s) <= longest)
            )
        elif schema.get("format") == "date":
            options.append(st.dates().map(str))
        elif schema.get("format") == "date-time":
            options.append(st.datetimes().map(lambda d: d.isoformat() + "Z"))
        else:
            options.append(st.text(min_size=schema.get("minLength", 0), max_size=min(longest, 200)))
    elif kind in ("number", "integer"):
        low, high = schema.get("minimum"), schema.get("maximum")
        options.append(
            st.integers(min_value=low, max_value=high) if kind == "integer" else st.floats(low, high)
        )
    elif kind == "boolean":
        options.append(st.booleans())
    elif kind == "array":
        options.append(
            st.lists(
                as_documented(schema.get("items", {}), components), max_size=min(schema.get("maxItems", 5), 5)
            )
        )
    elif kind == "object":
        values = schema.get("additionalProperties")
        options.append(
            st.dictionaries(
                st.text(max_size=20),
                as_documented(values, components) if isinstance(values, dict) else ANY_JSON,
                max_size=3,
            )
        )
    if schema.get("nullable"):
        options.append(st.none())
    return st.one_of(options) if options else ANY_JSON


def values_for(schema: dict, components: dict) -> st.SearchStrategy[Any]:
    """What one field is fuzzed with: what the document states, half the time; anything, the other half."""
    return st.one_of(as_documented(schema, components), ANY_JSON, st.sampled_from(HOSTILE_STRINGS))


def fuzz_one_field(
    client: APIClient,
    *,
    method: str,
    path: str,
    base: dict,
    field: str,
    values: st.SearchStrategy[Any],
    sent: dict[tuple[str, str], int],
    failures: list[str],
    component: str,
) -> None:
    """Send `values` of one field, each in an otherwise valid body; note any server error."""

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(value=values)
    def send(value: Any) -> None:
        response = getattr(client, method)(path, {**base, field: value}, format="json")
        sent[(component, field)] = sent.get((component, field), 0) + 1
        if response.status_code >= 500:
            failures.append(f"{method.upper()} {path} {field}={value!r}: {response.status_code}")
        assert response.status_code < 500

    for value in EVERY_FIELD_GETS:
        send = example(value=value)(send)
    send()


@pytest.fixture
def client(operator, monkeypatch) -> APIClient:
    # The account throttle (1,200 a minute) would answer 429 to most of the run and so test nothing.
    monkeypatch.setattr("config.throttling.AccountThrottle.THROTTLE_RATES", {"user": "1000000/minute"})
    api = APIClient()
    api.force_authenticate(operator)
    return api


def test_no_field_of_the_destination_and_recipient_apis_answers_a_5xx(client):
    document = openapi()
    components = document["components"]["schemas"]
    destination = Destination.objects.create(
        name="fuzzed", **destination_url_fields(url="https://fuzzed.example.org/hook")
    )
    recipient = UserFactory()
    valid = {
        "DestinationRequest": {"name": "fuzz", "url": "https://fuzz.example.org/hook"},
        "UserRequest": {
            "first_name": "Ada",
            "last_name": "Lovelace",
            "date_of_birth": "1990-12-10",
            "timezone": "Europe/London",
        },
    }
    operations = [
        ("post", "/api/v1/destinations/", "DestinationRequest", valid["DestinationRequest"]),
        ("patch", f"/api/v1/destinations/{destination.pk}/", "PatchedDestinationUpdateRequest", {}),
        ("post", "/api/v1/users/", "UserRequest", valid["UserRequest"]),
        ("patch", f"/api/v1/users/{recipient.pk}/", "PatchedUserRequest", {}),
    ]
    started = time.monotonic()
    sent: dict[tuple[str, str], int] = {}
    failures: list[str] = []

    for method, path, component, base in operations:
        for field, schema in components[component]["properties"].items():
            if schema.get("readOnly"):
                continue

            fuzz_one_field(
                client,
                method=method,
                path=path,
                base=base,
                field=field,
                values=values_for(schema, components),
                sent=sent,
                failures=failures,
                component=component,
            )

    elapsed = time.monotonic() - started
    assert not failures, failures
    # Every writable field of the four bodies was sent, each many times.
    assert {field for _, field in sent} >= {
        "name",
        "url",
        "audience_labels",
        "excluded_labels",
        "timeout",
        "digest_time",
        "digest_timezone",
        "message_overrides",
        "secret",
        "first_name",
        "date_of_birth",
        "timezone",
        "send_time",
        "labels",
        "language",
        "paused",
    }
    assert min(sent.values()) >= min(EXAMPLES, 2)
    assert elapsed < BOUND_SECONDS, f"the fuzz took {elapsed:.0f} s"
