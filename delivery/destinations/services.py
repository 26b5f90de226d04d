"""Writes to destinations: create, edit, delete, rotate a secret, pause and resume; the default's seeding.

Every write validates what it is given by the cleaners of the declared settings
(delivery.destinations.fields) and raises ValidationError naming the field (the
API answers 400), changing nothing. The row lock each write takes
(FOR UPDATE) is the one the scheduler's claim waits on (it reads the enabled
destinations FOR KEY SHARE, delivery.destinations.selectors.destinations_for_claim), so an
edit and a claim never interleave: a URL edit moves every unsent delivery, and
a deletion sees every delivery queued for the destination.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings as django_settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from delivery.credentials import signing_secrets as secret_store
from delivery.credentials.receiver_urls import url_decrypt, url_encrypt, url_key, url_normalise
from delivery.destinations.fields import (
    BOTH_LABELS,
    DIGEST_FIELDS,
    DestinationSettings,
    digest_settings_check,
    email_settings_check,
    labels_both,
    mention_settings_check,
    settings_clean,
)
from delivery.destinations.selectors import (
    destination_last_digest_date,
    destination_signing_secrets,
    destination_unsent_count,
    destinations_for_claim,
)
from delivery.models import (
    Delivery,
    DeliveryStatus,
    Destination,
    DestinationFormat,
    DestinationSecret,
    Endpoint,
    EndpointState,
)
from delivery.receivers.signing import parse_secrets
from delivery.rules.digest_calendar import digest_schedule
from delivery.states.endpoints import (
    endpoint_display_follow,
    endpoint_for_destination,
    endpoint_forget_gone,
    endpoint_pause,
    endpoint_resume,
)
from kinds import kind_for
from runtime.sql import execute

logger = logging.getLogger(__name__)

DEFAULT_NAME = "default"
UNSENT = (DeliveryStatus.QUEUED, DeliveryStatus.SENDING)


class DestinationInUse(Exception):
    """A destination with deliveries still to send cannot be deleted: they would lose their receiver."""


class DestinationVersionMismatch(Exception):
    """The destination was changed since the caller read it: the version it expects is gone."""

    def __init__(self, *, current_version: int):
        super().__init__(f"The destination is at version {current_version}.")
        self.current_version = current_version


def _lock_current(
    *, destination: Destination, expected_versions: Collection[int] | None
) -> Destination | None:
    """The destination's row as stored now, locked until the transaction ends (None if deleted meanwhile).

    DestinationVersionMismatch if the caller expects versions it is no longer at (None: any will do).
    """
    current = Destination.objects.select_for_update().filter(pk=destination.pk).first()
    if current is not None and expected_versions is not None and current.version not in expected_versions:
        raise DestinationVersionMismatch(current_version=current.version)
    return current


@dataclass(frozen=True)
class NewSecret:
    """A secret just made: the only moment its value is known outside the database."""

    destination: Destination
    # None for a kind that is not signed (kinds.base.Kind.signed): a chat webhook gets no secret.
    secret: DestinationSecret | None
    value: str | None


def destination_url_fields(
    *,
    url: str,
    format: str = DestinationFormat.STANDARD,  # noqa: A002 - the field's name
) -> dict[str, str]:
    """The columns that keep a (validated, normalised) URL of a destination of `format`: encrypted, its keyed
    hash, and what may be shown of it (all but the part its kind knows is the credential)."""
    return {"url_ciphertext": url_encrypt(url), "url_key": url_key(url), "url_display": _shown(url, format)}


def _shown(url: str, format: str) -> str:  # noqa: A002 - the field's name
    return kind_for(format).shown_url(url)


def destination_values_clean(*, values: Mapping[str, Any], exclude: int | None = None) -> dict[str, Any]:
    """The values given for a destination (other than `exclude`), checked and normalised; ValidationError
    naming every field at fault. What every write below checks first, and what a form checks before it."""
    cleaned = settings_clean(values)
    _unique_fields_checked(values=cleaned, exclude=exclude)
    return cleaned


def _stored(values: Mapping[str, Any], *, format: str) -> dict[str, Any]:  # noqa: A002 - the field's name
    """Cleaned values as the model's columns: a URL as destination_url_fields for a destination of `format`."""
    stored = {name: value for name, value in values.items() if name not in ("url", "smtp_password")}
    if "url" in values:
        stored.update(destination_url_fields(url=values["url"], format=format))
    if values.get("smtp_password") is not None:
        # A credential, encrypted as the receiver URLs are; "" clears it.
        password = values["smtp_password"]
        stored["smtp_password_ciphertext"] = url_encrypt(password) if password else ""
    return stored


def _unique_fields_checked(*, values: Mapping[str, Any], exclude: int | None = None) -> None:
    """A friendly error for a name or URL another destination has (the unique keys still decide)."""
    errors = {}
    others = Destination.objects.all() if exclude is None else Destination.objects.exclude(pk=exclude)
    if "name" in values and others.filter(name=values["name"]).exists():
        errors["name"] = ["Another destination has this name."]
    if "url" in values and others.filter(url_key=url_key(values["url"])).exists():
        # Normalised first: HTTP://host:443/#x and https://host/ are one receiver.
        errors["url"] = ["Another destination has this URL (the same receiver, however it is spelt)."]
    if errors:
        raise ValidationError(errors)


def _saved(destination: Destination, *, values: Mapping[str, Any]) -> None:
    try:
        with transaction.atomic():
            destination.save()
    except IntegrityError:
        # Another write took the name or URL between the check and this one.
        _unique_fields_checked(values=values, exclude=destination.pk)
        raise


def destination_create(
    *, settings: DestinationSettings, operator: str, secret: str | None = None
) -> NewSecret:
    """A new destination with one signing secret (made here unless `secret` is given), returned once; none for a
    kind whose service checks no signature (Slack, Discord, Teams), which refuses one given."""
    values = settings_clean(settings.values())
    value = destination_secret_clean(format=values["format"], secret=secret)
    with transaction.atomic():
        _unique_fields_checked(values=values)
        destination = Destination(
            **_stored(values, format=values["format"]), created_by=operator, updated_by=operator
        )
        email_settings_check(destination, url=values["url"])
        digest_schedule(destination=destination, now=timezone.now())
        _saved(destination, values=values)
        endpoint_for_destination(destination=destination)
        stored = _secret_add(destination=destination, value=value) if value is not None else None
    logger.info(
        "Destination created by %s", operator, extra={"destination": destination.name, "operator": operator}
    )
    return NewSecret(destination=destination, secret=stored, value=value)


def destination_update(
    *,
    destination: Destination,
    operator: str,
    changes: Mapping[str, Any],
    expected_versions: Collection[int] | None = None,
) -> Destination:
    """Apply `changes` (any of delivery.destinations.fields.EDITABLE_FIELDS); a new URL takes the deliveries not yet delivered with it,
    and the endpoint's pause (destination_endpoint_move)."""
    values = settings_clean(changes)
    with transaction.atomic():
        current = _lock_current(destination=destination, expected_versions=expected_versions)
        if current is None:
            raise Destination.DoesNotExist(f"Destination {destination.pk} no longer exists.")
        _unique_fields_checked(values=values, exclude=current.pk)
        old_key, old_format = current.url_key, current.format
        if "url" in values and url_key(values["url"]) == old_key:
            values = {name: value for name, value in values.items() if name != "url"}  # the same receiver
        for name, value in _stored(values, format=values.get("format", current.format)).items():
            setattr(current, name, value)
        reshown = "url" in values or current.format != old_format
        if "url" not in values and current.format != old_format:
            # The same URL shown as its new kind shows it: another kind hides another part.
            current.url_display = _shown(url_decrypt(current.url_ciphertext), current.format)
        # A change of one of the two lists, checked against the other as stored.
        if labels_both(audience=current.audience_labels, excluded=current.excluded_labels):
            raise ValidationError({"excluded_labels": [BOTH_LABELS]})
        digest_settings_check(current)
        mention_settings_check(current)
        email_settings_check(current, url=values.get("url") or url_decrypt(current.url_ciphertext))
        if kind_for(current.format).signed and not kind_for(old_format).signed and not _signs(current):
            raise ValidationError(
                {
                    "format": [
                        f"A {kind_for(current.format).label} destination signs each message and this one has no "
                        "secret (its kind had none): rotate-secret gives it one, then change its format."
                    ]
                }
            )
        if set(values) & set(DIGEST_FIELDS):
            digest_schedule(
                destination=current,
                now=timezone.now(),
                last_built=destination_last_digest_date(destination_id=current.pk),
            )
        current.updated_by = operator
        current.version += 1
        _saved(current, values=values)
        moved = 0
        if current.url_key != old_key:
            moved = destination_endpoint_move(destination=current, old_key=old_key, operator=operator)
        if reshown:
            endpoint_display_follow(destination=current)
    logger.info(
        "Destination changed by %s",
        operator,
        extra={"destination": current.name, "operator": operator, "fields": sorted(values), "moved": moved},
    )
    return current


def destination_delete(
    *, destination: Destination, operator: str, expected_versions: Collection[int] | None = None
) -> None:
    """Delete a destination that has nothing left to send; DestinationInUse if it has.

    Its history keeps its deliveries and attempts, without a destination.
    Disable it first and let its queue drain (or pause it and wait for expiry).
    """
    with transaction.atomic():
        current = _lock_current(destination=destination, expected_versions=expected_versions)
        if current is None:
            return
        unsent = destination_unsent_count(destination_id=current.pk)
        if unsent:
            raise DestinationInUse(
                f"Destination {current.name} still has {unsent} deliveries to send: disable it and let them "
                "finish before deleting it."
            )
        current.delete()
        _endpoint_drop_if_unused(key=current.url_key)
    logger.info(
        "Destination deleted by %s", operator, extra={"destination": destination.name, "operator": operator}
    )


def destination_rotate_secret(
    *, destination: Destination, operator: str, secret: str | None = None
) -> NewSecret:
    """Add a new signing secret; the ones in force sign beside it for DESTINATION_SECRET_GRACE, then go."""
    value = _secret_value(secret)
    now = timezone.now()
    with transaction.atomic():
        current = Destination.objects.select_for_update().get(pk=destination.pk)
        in_force = destination_signing_secrets(destinations=[current], now=now)[current.pk]
        if secret_store.secret_key(value) in {secret_store.secret_key(signing) for signing in in_force}:
            # It would sign twice ("v1,X v1,X") and end nothing: a rotation is to a new secret.
            raise ValidationError(
                {
                    "secret": [
                        "This secret signs for this destination already (the one in force, or one in its "
                        "grace period): rotate to a new one."
                    ]
                }
            )
        current.secrets.filter(expires_at__isnull=True).update(
            expires_at=now + django_settings.DESTINATION_SECRET_GRACE
        )
        stored = _secret_add(destination=current, value=value)
        current.updated_by = operator
        current.version += 1
        current.save(update_fields=["updated_by", "updated_at", "version"])
    logger.info(
        "Destination secret rotated by %s",
        operator,
        extra={"destination": current.name, "operator": operator, "secret_hint": stored.hint},
    )
    return NewSecret(destination=current, secret=stored, value=value)


def destination_drop_previous_secrets(*, destination: Destination, operator: str) -> int:
    """End a rotation's grace period now: only the newest secret signs from here on; return how many went."""
    dropped, _ = destination.secrets.filter(expires_at__isnull=False).delete()
    logger.info(
        "Destination's previous secrets dropped by %s",
        operator,
        extra={"destination": destination.name, "operator": operator, "dropped": dropped},
    )
    return dropped


def destination_secrets_drop_expired(*, now: datetime) -> int:
    """Delete the secrets whose grace period is over (a few rows, read through their partial index)."""
    dropped, _ = DestinationSecret.objects.filter(expires_at__lte=now).delete()
    return dropped


def destination_url_reveal(*, destination: Destination, operator: str) -> str:
    """The destination's whole receiver URL, for an operator allowed to change it who asked; logged (not the URL)."""
    url = destination.receiver_url()
    logger.warning(
        "Destination's receiver URL revealed to %s",
        operator,
        extra={"destination": destination.name, "operator": operator},
    )
    return url


def destination_secrets_reencrypt() -> int:
    """Encrypt every stored secret and receiver URL under the first key of WEBHOOK_SECRET_KEYS, and key every
    receiver again under DJANGO_SECRET_KEY as it is now; return how many rows were re-encrypted.

    The keys (delivery.credentials.receiver_urls.url_key) follow DJANGO_SECRET_KEY: after it changed, this makes the
    stored ones current, so that a new destination with a URL already in use is still refused. A delivery
    names its endpoint by key: each one whose key changes is rewritten (one UPDATE).
    """
    count = 0
    renamed: dict[str, str] = {}
    with transaction.atomic():
        for stored in DestinationSecret.objects.select_for_update():
            stored.ciphertext = secret_store.secret_reencrypt(stored.ciphertext)
            stored.save(update_fields=["ciphertext"])
            count += 1
        count += _receiver_urls_reencrypt(model=Destination, key_column="url_key", renamed=renamed)
        count += _receiver_urls_reencrypt(model=Endpoint, key_column="key", renamed=renamed)
        if renamed:
            execute(
                f"UPDATE {Delivery._meta.db_table} d SET endpoint_key = v.new FROM (VALUES "
                + ", ".join(["(%s, %s)"] * len(renamed))
                + ") AS v(old, new) WHERE d.endpoint_key = v.old",
                [value for pair in renamed.items() for value in pair],
            )
    return count


def _receiver_urls_reencrypt(
    *, model: type[Destination] | type[Endpoint], key_column: str, renamed: dict[str, str]
) -> int:
    """Encrypt every receiver URL of `model`'s rows again and key it again in `key_column`; each key that
    changes is added to `renamed` (old: new). Return how many rows were re-encrypted."""
    count = 0
    for row in model.objects.select_for_update():
        old_key, new_key = getattr(row, key_column), url_key(url_decrypt(row.url_ciphertext))
        model.objects.filter(pk=row.pk).update(
            url_ciphertext=secret_store.secret_reencrypt(row.url_ciphertext), **{key_column: new_key}
        )
        if new_key != old_key:
            renamed[old_key] = new_key
        count += 1
    return count


def destination_endpoint(*, destination: Destination) -> Endpoint:
    """The endpoint row of the destination's URL (its health and pause)."""
    return endpoint_for_destination(destination=destination)


def destination_endpoint_move(*, destination: Destination, old_key: str, operator: str) -> int:
    """The destination (locked by the caller, saved with its new URL) leaves the endpoint of `old_key`: its
    unsent deliveries go to the new URL's endpoint, and so does an operator's pause, and the old endpoint
    row goes. Return how many deliveries moved.

    The new endpoint starts healthy (its health is the new receiver's to
    show), but a paused destination stays paused: an operator who paused it
    and fixes its URL resumes it when ready, not the edit. A SENDING delivery
    finishes its request to the old URL; its retry goes to the new one. A
    GONE verdict is the old receiver's and stays behind: the new URL is the
    operator's answer to it (endpoint_forget_gone), so it raises no alert
    while the old row waits for its SENDING ones.
    """
    moved = Delivery.objects.filter(destination=destination, status__in=UNSENT).update(
        endpoint_key=destination.url_key
    )
    new = endpoint_for_destination(destination=destination)
    old = Endpoint.objects.select_for_update().filter(key=old_key).first()
    if old is not None and old.state == EndpointState.PAUSED and new.state != EndpointState.PAUSED:
        Endpoint.objects.filter(pk=new.pk).update(
            state=EndpointState.PAUSED,
            paused_by=old.paused_by,
            paused_at=old.paused_at,
            failing_since=None,
            next_probe_at=None,
            probe_interval=None,
            updated_at=timezone.now(),
        )
    if not Destination.objects.filter(url_key=old_key).exists():
        endpoint_forget_gone(key=old_key, operator=operator)
    _endpoint_drop_if_unused(key=old_key)
    return moved


def _endpoint_drop_if_unused(*, key: str) -> None:
    """Delete the endpoint of `key` once no destination has its URL and nothing unsent goes to it.

    Deliveries of history keep the key; the endpoint they name is gone, as the
    receiver is from the configuration. Each unsent status is read through its
    partial index (delivery_queued_due_idx, delivery_lease_idx).
    """
    if Destination.objects.filter(url_key=key).exists():
        return
    if any(Delivery.objects.filter(status=status, endpoint_key=key).exists() for status in UNSENT):
        return
    Endpoint.objects.filter(key=key).delete()


def destination_pause(*, destination: Destination, operator: str) -> Endpoint:
    """Pause the destination's endpoint: its deliveries wait QUEUED until resumed."""
    return endpoint_pause(endpoint=destination_endpoint(destination=destination), operator=operator)


def destination_resume(*, destination: Destination, operator: str) -> Endpoint:
    return endpoint_resume(endpoint=destination_endpoint(destination=destination), operator=operator)


def destinations_for_queueing() -> list[Destination]:
    """The enabled destinations, locked FOR KEY SHARE for the caller's transaction; the default one seeded first
    if there is none at all (WEBHOOK_URL)."""
    destinations = destinations_for_claim()
    if not destinations and django_settings.WEBHOOK_URL:
        # Read again whoever seeded it: another process seeding at the same moment (a worker
        # starting, a second scheduler) made this insert wait for its commit and be refused, and
        # its row is there now. Had this batch gone on with none, its events would be COMPLETED
        # as if no destination subscribed, never sent.
        destinations_seed_default()
        destinations = destinations_for_claim()
    return destinations


def destinations_seed_default() -> Destination | None:
    """The destination WEBHOOK_URL and WEBHOOK_SECRET describe, made when no destination exists.

    How an installation from before destinations keeps sending without a
    change: subscribed to every event type, standard format, signed with every
    secret of WEBHOOK_SECRET (all in force, as they were). None when there is
    nothing to seed. Two processes seeding at once: the name's unique key keeps one.
    """
    if not django_settings.WEBHOOK_URL or Destination.objects.exists():
        return None
    secrets = parse_secrets(django_settings.WEBHOOK_SECRET)
    url = url_normalise(
        django_settings.WEBHOOK_URL
    )  # checked at the process's start (webhook_url_setting_check)
    try:
        with transaction.atomic():
            destination = Destination.objects.create(
                name=DEFAULT_NAME,
                **destination_url_fields(url=url),
                created_by="WEBHOOK_URL",
                updated_by="WEBHOOK_URL",
            )
            endpoint_for_destination(destination=destination)
            for value in secrets:
                _secret_add(destination=destination, value=value)
    except IntegrityError:
        return None
    logger.warning(
        "Seeded the destination %r from WEBHOOK_URL (no destination existed); unset WEBHOOK_URL once "
        "destinations are managed from the console or the API",
        DEFAULT_NAME,
        extra={"destination": DEFAULT_NAME},
    )
    return destination


def destination_secret_clean(*, format: str, secret: str | None) -> str | None:  # noqa: A002 - the field's name
    """The signing secret a new destination of `format` starts with: the one given, checked, or one made; None for
    a kind that is not signed. ValidationError naming `secret` (never echoing it)."""
    if not kind_for(format).signed:
        if secret:
            raise ValidationError({"secret": [_not_signed(format)]})
        return None
    return _secret_value(secret)


def _not_signed(format: str) -> str:  # noqa: A002 - the field's name
    return (
        f"A {kind_for(format).label} destination is not signed: its service checks no signature, and its "
        "webhook URL is its credential."
    )


def _signs(destination: Destination) -> bool:
    """Whether a secret of the destination's is in force."""
    now = timezone.now()
    return destination.secrets.filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now)).exists()


def _secret_value(secret: str | None) -> str:
    if secret is None or secret == "":
        return secret_store.secret_generate()
    try:
        return secret_store.secret_check(secret)
    except ValidationError as exc:
        raise ValidationError({"secret": exc.messages}) from None


def _secret_add(*, destination: Destination, value: str) -> DestinationSecret:
    return DestinationSecret.objects.create(
        destination=destination,
        ciphertext=secret_store.secret_encrypt(value),
        hint=secret_store.secret_hint(value),
    )
