"""What the OpenAPI description says of every API operation: credentials, errors and their bodies.

These come from project-wide machinery (the authentication classes and permissions,
the body-size middleware, the JSON parser, pagination, throttling and the exception
handler), not from any one view, so they are described once here rather than on
each view. drf-spectacular uses `AutoSchema` for every view (REST_FRAMEWORK's
DEFAULT_SCHEMA_CLASS), and finds the authentication extensions by their target
classes once this module is imported.
"""

import re

from django.conf import settings
from drf_spectacular import openapi
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.plumbing import (
    ResolvedComponent,
    build_array_type,
    build_basic_type,
    get_view_model,
)
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import serializers

# Methods whose request carries a body, and so can be refused for what is in it.
BODY_METHODS = ("POST", "PUT", "PATCH")


class TokenScheme(OpenApiAuthenticationExtension):
    target_class = "rest_framework.authentication.TokenAuthentication"
    # config.authentication's throttled subclass included.
    match_subclasses = True
    name = "tokenAuth"
    # Above drf-spectacular's own extension for the class, which says less.
    priority = 1

    def get_security_definition(self, auto_schema):
        return _api_key(
            "header",
            "Authorization",
            "`Token <key>`: the word Token, a space and an operator's DRF token (`python manage.py "
            "drf_create_token <operator>`). On the docs page type it so, such as `Token 9944b09…`: the key "
            "alone is refused (401).",
        )


class SessionScheme(OpenApiAuthenticationExtension):
    target_class = "rest_framework.authentication.SessionAuthentication"
    name = "cookieAuth"
    priority = 1

    def get_security_definition(self, auto_schema):
        return _api_key(
            "cookie",
            settings.SESSION_COOKIE_NAME,
            "The session of an operator logged in to the admin. Requests that "
            f"change data also need the `X-CSRFToken` header, set to the "
            f"`{settings.CSRF_COOKIE_NAME}` cookie's value.",
        )


def _api_key(where: str, name: str, description: str) -> dict:
    """An OpenAPI security scheme of type apiKey: a credential sent `where` (header, cookie) under `name`."""
    return {"type": "apiKey", "in": where, "name": name, "description": description}


class ErrorSerializer(serializers.Serializer):
    """Any refusal other than invalid fields: one message saying why."""

    detail = serializers.CharField(help_text="What went wrong, for a person to read.")


def _messages(description: str) -> dict:
    string = build_basic_type(OpenApiTypes.STR)
    assert string is not None  # every basic type has a schema
    return {**build_array_type(string), "description": description}


VALIDATION_ERROR_SCHEMA = {
    "type": "object",
    "description": (
        "Every invalid field of the body, each with its messages. Unknown fields are "
        "listed too (`Unknown field.`), so a misspelt field is never silently ignored."
    ),
    "properties": {
        "non_field_errors": _messages(
            "Problems with the body as a whole, such as a body that is not a JSON object."
        ),
    },
    "additionalProperties": _messages("Why this field was refused."),
    "example": {
        "timezone": [
            "'UTC+5' is a UTC offset, not a time zone: offsets do not follow daylight "
            "saving time. Use an IANA name such as Asia/Kathmandu."
        ],
        "date_of_birth": ["Date of birth must not be before 1900-01-01."],
    },
}


def response_header(name: str, kind: OpenApiTypes, *statuses: int, description: str) -> OpenApiParameter:
    """A header that every response with one of `statuses` carries."""
    return OpenApiParameter(
        name,
        kind,
        OpenApiParameter.HEADER,
        response=[str(status) for status in statuses],
        required=True,
        description=description,
    )


RESPONSE_HEADERS = [
    response_header(
        "WWW-Authenticate", OpenApiTypes.STR, 401, description="`Token`: the scheme to authenticate with."
    ),
    response_header(
        "Retry-After",
        OpenApiTypes.INT,
        429,
        description="Seconds to wait before the next request can be accepted.",
    ),
]


# config.preconditions: an operation that declares IF_MATCH honours it (and so
# gets a 412, and a 400 for a header that is not a list of entity tags); one that
# sends the version back declares the ETag header on its success statuses.
IF_MATCH = OpenApiParameter(
    "If-Match",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    description=(
        'Optional: `*` or a list of ETags, such as `"3"`. The request is carried out '
        "only if the resource is still at one of these versions; otherwise it answers "
        '412 and changes nothing. Weak tags (`W/"3"`) never match.'
    ),
)


def etag_header(*statuses: int) -> OpenApiParameter:
    return response_header(
        "ETag",
        OpenApiTypes.STR,
        *statuses,
        description=(
            'The version of the resource in this response, such as `"3"`: send it '
            "back in If-Match so that a change applies only to this version."
        ),
    )


class AutoSchema(openapi.AutoSchema):
    """drf-spectacular's inspector, plus the error responses every API operation can give."""

    def get_override_parameters(self):
        return [*super().get_override_parameters(), *RESPONSE_HEADERS]

    def _map_serializer(self, serializer, direction, bypass_extensions=False):
        schema = super()._map_serializer(serializer, direction, bypass_extensions)
        if direction == "request" and schema.get("type") == "object":
            # Every body the API takes refuses a field it does not know (400, `Unknown field.`)
            # instead of ignoring it, so that a misspelt field is never silently dropped; a client
            # (and a generated one) must be told so.
            schema["additionalProperties"] = False
        return schema

    def _honours_if_match(self) -> bool:
        return IF_MATCH in self.get_override_parameters()

    def _get_response_bodies(self, direction="response"):
        responses = super()._get_response_bodies(direction)
        for status, description, schema in self._error_responses():
            # What a view declares itself is more precise than the general case.
            if status not in responses:
                responses[status] = self._get_response_for_code(
                    OpenApiResponse(schema, description), status, direction=direction
                )
        return responses

    def _validation_error_component(self) -> ResolvedComponent:
        validation = ResolvedComponent(
            name="ValidationError",
            type=ResolvedComponent.SCHEMA,
            object="ValidationError",
            schema=VALIDATION_ERROR_SCHEMA,
        )
        self.registry.register_on_missing(validation)
        return validation

    def _error_responses(self) -> list[tuple[str, str, dict]]:
        """(status, description, schema) of each error the operation can answer."""
        error = self.resolve_serializer(ErrorSerializer, "response").ref
        return [
            *self._bad_request(error=error),
            ("401", "No credentials, or a token that does not exist.", error),
            (
                "403",
                "The account lacks the model permission this operation needs, or a "
                "session-authenticated request that changes data came without its CSRF token.",
                error,
            ),
            *self._not_found(error=error),
            *self._precondition_failed(error=error),
            *self._body_refused(error=error),
            (
                "429",
                "Too many requests from this account, or too many wrong tokens from this "
                "address: wait `Retry-After` seconds, then try again.",
                error,
            ),
        ]

    def _bad_request(self, *, error: dict) -> list[tuple[str, str, dict]]:
        """The 400: a body's invalid fields, a malformed If-Match, or a list's bad page size."""
        bad_if_match = "an If-Match header that is not `*` or a list of quoted entity tags (`detail`)"
        if self.method in BODY_METHODS:
            causes = [
                "invalid fields (each listed with its messages)",
                "a body that is not valid JSON (`detail`)",
            ]
            if self._honours_if_match():
                causes.append(bad_if_match)
            return [
                (
                    "400",
                    f"The request was refused and nothing changed: {', '.join(causes[:-1])} or {causes[-1]}.",
                    {"oneOf": [self._validation_error_component().ref, error]},
                )
            ]
        if self._honours_if_match():
            return [("400", f"Refused, nothing changed: {bad_if_match}.", error)]
        if self._is_list_view() and self._get_paginator():
            return [
                (
                    "400",
                    "A `page_size` that is not a whole number of 1 or more.",
                    self._validation_error_component().ref,
                )
            ]
        return []

    def _not_found(self, *, error: dict) -> list[tuple[str, str, dict]]:
        """The 404: no object at the path's key, or a page past the last."""
        not_found = []
        if lookup := re.search(r"\{(\w+)\}", self.path):
            not_found.append(
                f"No {get_view_model(self.view)._meta.verbose_name} has this {lookup.group(1).replace('_', ' ')}."
            )
        if self._is_list_view() and self._get_paginator():
            not_found.append("The page number is past the last page or not a number.")
        return [("404", " ".join(not_found), error)] if not_found else []

    def _precondition_failed(self, *, error: dict) -> list[tuple[str, str, dict]]:
        if not self._honours_if_match():
            return []
        return [
            (
                "412",
                "If-Match names no version the resource is at: it has changed since it "
                "was read. Nothing was changed; read it again for its current ETag.",
                error,
            )
        ]

    def _body_refused(self, *, error: dict) -> list[tuple[str, str, dict]]:
        """What the body-size middleware and the JSON parser refuse of a request's body, before any view."""
        if self.method not in BODY_METHODS:
            return []
        return [
            (
                "411",
                "The body was sent with `Transfer-Encoding` (chunked) instead of a `Content-Length` header.",
                error,
            ),
            ("413", f"The body is larger than {settings.API_MAX_BODY_BYTES} bytes.", error),
            ("415", "The body is not `application/json`.", error),
        ]
