"""Optimistic concurrency over HTTP: a resource's version as its ETag, If-Match checked against it."""

import re

from rest_framework.exceptions import APIException, ParseError

# One entity tag of a list: optional weakness flag, then a quoted opaque value.
_ENTITY_TAG = re.compile(r'\s*(W/)?"([^"\x00-\x1f]*)"\s*(,|$)')


class PreconditionFailed(APIException):
    status_code = 412
    default_detail = "The resource has changed since the version given in If-Match."
    default_code = "precondition_failed"


def etag_for(*, version: int) -> str:
    return f'"{version}"'


def if_match_versions(header: str | None) -> frozenset[int] | None:
    """The versions an If-Match header accepts; None when any will do (no header, or `*`).

    If-Match compares strongly (RFC 9110, 13.1.1), so weak tags never match, and
    nor does a tag this API never sent: both just leave the set without them, and
    an empty set fails the precondition. A header that is not a list of entity
    tags at all is a client error.
    """
    if header is None or header.strip() == "*":
        return None
    versions: set[int] = set()
    position = 0
    while position < len(header):
        match = _ENTITY_TAG.match(header, position)
        if match is None or match.end() == position:
            raise ParseError('If-Match must be "*" or a list of quoted entity tags, such as "3".')
        weak, opaque, _ = match.groups()
        if not weak and opaque.isdigit():
            versions.add(int(opaque))
        position = match.end()
    return frozenset(versions)
