"""A person's opt-out of one destination: the claim, the digests and what is queued honour it at once.

The record of each change names who and when; the export carries the opt-outs; the erasure
takes them; the signed one-click token opts out exactly the pair it names.
"""

from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone

from delivery.actions.optouts import (
    destination_opt_out_set,
    destination_opt_outs_of,
    unsubscribe_pair,
    unsubscribe_token,
    unsubscribe_token_read,
    unsubscribe_url,
)
from delivery.destinations.services import destination_url_fields
from delivery.dispatch.claim import OPTED_OUT_REASON, deliveries_enqueue_due
from delivery.dispatch.digests import digests_build_due
from delivery.dispatch.withdraw import OPTED_OUT
from delivery.models import Delivery, DeliveryStatus, Destination, DestinationOptOut
from delivery.rules.digest_calendar import digest_schedule
from scheduling.celebration import ChangedBy
from scheduling.models import Event, EventStatus
from users.models import CelebrationChange
from users.selectors import user_export
from users.services import user_create, user_erase
from users.tests.factories import UserFactory

pytestmark = pytest.mark.django_db

BERLIN = ZoneInfo("Europe/Berlin")


def _destination(name: str, **fields) -> Destination:
    return Destination.objects.create(
        name=name, **destination_url_fields(url=f"https://chat.example/{name}"), **fields
    )


def _person(first: str = "Ada", **fields):
    return user_create(
        first_name=first, last_name="Lovelace", date_of_birth=date(1990, 5, 5), timezone="UTC", **fields
    )


def _all_due() -> None:
    Event.objects.update(target_timestamp_utc=timezone.now() - timedelta(minutes=1))


def test_the_claim_sends_nothing_to_a_destination_the_person_left_and_the_rest_as_before(settings):
    settings.WEBHOOK_URL = ""
    general = _destination("general")
    _destination("platform")
    ada = _person("Ada")
    _person("Grace")
    destination_opt_out_set(user=ada, destination=general, opted_out=True, changed_by=ChangedBy.PERSON)
    _all_due()

    deliveries_enqueue_due()

    reached = {
        (d.event.user.first_name, d.destination.name)
        for d in Delivery.objects.select_related("event__user", "destination")
    }
    assert reached == {("Ada", "platform"), ("Grace", "general"), ("Grace", "platform")}


def test_an_occurrence_whose_person_left_every_destination_completes_saying_so(settings):
    settings.WEBHOOK_URL = ""
    general = _destination("general")
    ada = _person()
    destination_opt_out_set(user=ada, destination=general, opted_out=True, changed_by=ChangedBy.PERSON)
    _all_due()

    deliveries_enqueue_due()

    assert not Delivery.objects.exists()
    event = Event.objects.get(user=ada, status=EventStatus.COMPLETED)
    assert event.failure_reason == OPTED_OUT_REASON


def test_an_opt_out_after_the_claim_withdraws_the_queued_delivery_there_and_only_there(settings):
    settings.WEBHOOK_URL = ""
    general = _destination("general")
    _destination("platform")
    ada = _person()
    _all_due()
    deliveries_enqueue_due()
    assert Delivery.objects.filter(status=DeliveryStatus.QUEUED).count() == 2

    changed = destination_opt_out_set(
        user=ada, destination=general, opted_out=True, changed_by=ChangedBy.PERSON
    )

    assert changed
    assert list(Delivery.objects.values_list("destination__name", flat=True)) == ["platform"]
    assert Event.objects.get(user=ada, status=EventStatus.PROCESSING)


def test_an_opt_out_of_the_only_destination_after_the_claim_fails_the_occurrence_with_the_reason(settings):
    settings.WEBHOOK_URL = ""
    general = _destination("general")
    ada = _person()
    _all_due()
    deliveries_enqueue_due()

    destination_opt_out_set(user=ada, destination=general, opted_out=True, changed_by=ChangedBy.PERSON)

    assert not Delivery.objects.exists()
    event = Event.objects.get(user=ada, status=EventStatus.FAILED)
    assert event.failure_reason == OPTED_OUT.format(name="general")


def test_a_delivery_being_sent_is_not_touched_by_an_opt_out(settings):
    settings.WEBHOOK_URL = ""
    general = _destination("general")
    ada = _person()
    _all_due()
    deliveries_enqueue_due()
    Delivery.objects.update(
        status=DeliveryStatus.SENDING, locked_by="w1", locked_until=timezone.now() + timedelta(minutes=1)
    )

    destination_opt_out_set(user=ada, destination=general, opted_out=True, changed_by=ChangedBy.PERSON)

    assert Delivery.objects.get().status == DeliveryStatus.SENDING


def _digest_destination(name: str, day: date) -> Destination:
    destination = _destination(
        name, digest_time=time(9, 0), digest_timezone="Europe/Berlin", next_digest_at=timezone.now()
    )
    digest_schedule(destination=destination, now=datetime.combine(day, time(8, 0), tzinfo=BERLIN))
    destination.save()
    return destination


def _born_on(day: date, first: str):
    return UserFactory(
        first_name=first,
        last_name="Lovelace",
        date_of_birth=date(1990, day.month, day.day),
        timezone="Europe/Berlin",
    )


def test_a_digest_leaves_out_whoever_opted_out_of_it_and_an_opt_out_takes_them_out_of_a_queued_one():
    day = timezone.now().astimezone(BERLIN).date() + timedelta(days=3)
    ada, grace, alan = _born_on(day, "Ada"), _born_on(day, "Grace"), _born_on(day, "Alan")
    team = _digest_destination("team", day)
    destination_opt_out_set(user=ada, destination=team, opted_out=True, changed_by=ChangedBy.PERSON)

    digests_build_due(now=datetime.combine(day, time(9, 0), tzinfo=BERLIN))
    delivery = Delivery.objects.select_related("digest").get()
    assert sorted(e["user_id"] for e in delivery.digest.entries) == sorted([str(grace.pk), str(alan.pk)])

    destination_opt_out_set(user=grace, destination=team, opted_out=True, changed_by=ChangedBy.PERSON)

    delivery.refresh_from_db()
    delivery.digest.refresh_from_db()
    assert [e["user_id"] for e in delivery.digest.entries] == [str(alan.pk)]
    assert "Grace" not in str(delivery.payload) and "Ada" not in str(delivery.payload)


def test_each_change_is_recorded_with_who_and_when_and_setting_it_twice_changes_nothing():
    general = _destination("general")
    ada = _person()

    assert destination_opt_out_set(
        user=ada, destination=general, opted_out=True, changed_by=ChangedBy.PERSON, actor="ignored"
    )
    assert not destination_opt_out_set(
        user=ada, destination=general, opted_out=True, changed_by=ChangedBy.PERSON
    )
    assert destination_opt_outs_of(user_id=ada.pk) == {general.pk}
    assert destination_opt_out_set(
        user=ada, destination=general, opted_out=False, changed_by=ChangedBy.OPERATOR, actor="hr"
    )

    changes = list(
        CelebrationChange.objects.filter(user=ada).values_list(
            "field", "changed_by", "actor", "destination_id", "destination_name", "old_value", "new_value"
        )
    )
    assert changes == [
        ("destination", ChangedBy.PERSON, "", general.pk, "general", "in", "out"),
        ("destination", ChangedBy.OPERATOR, "hr", general.pk, "general", "out", "in"),
    ]
    assert destination_opt_outs_of(user_id=ada.pk) == set()


def test_the_export_carries_the_opt_outs_and_their_record_and_the_erasure_takes_them():
    general = _destination("general")
    ada = _person()
    destination_opt_out_set(user=ada, destination=general, opted_out=True, changed_by=ChangedBy.PERSON)

    export = user_export(user_id=ada.pk)

    assert [
        (o["destination_id"], o["destination__name"], o["changed_by"]) for o in export["destination_opt_outs"]
    ] == [(general.pk, "general", ChangedBy.PERSON)]
    assert export["celebration_changes"][0]["destination_name"] == "general"
    user_erase(user=ada)
    assert not DestinationOptOut.objects.exists() and not CelebrationChange.objects.exists()


def test_the_unsubscribe_token_names_its_pair_and_nothing_else_reads():
    token = unsubscribe_token(user_id=UserFactory().pk, destination_id=7)

    user_id, destination_id = unsubscribe_token_read(token=token)
    assert destination_id == 7
    assert unsubscribe_token_read(token=token[:-2] + "xx") is None
    assert unsubscribe_token_read(token="nonsense") is None
    assert unsubscribe_token_read(token="") is None


def test_the_unsubscribe_url_is_absolute_on_the_public_base(settings):
    settings.PUBLIC_BASE_URL = "https://greetings.example.com/"

    url = unsubscribe_url(user_id=UserFactory().pk, destination_id=3)

    assert url.startswith("https://greetings.example.com/p/unsubscribe/") and url.endswith("/")


def test_a_token_of_an_erased_person_or_a_deleted_destination_opts_out_nothing():
    general = _destination("general")
    ada = _person()
    token = unsubscribe_token(user_id=ada.pk, destination_id=general.pk)
    general_id = general.pk
    general.delete()

    assert unsubscribe_pair(token=token) is None
    assert not DestinationOptOut.objects.exists()
    assert unsubscribe_pair(token=unsubscribe_token(user_id=ada.pk, destination_id=general_id + 1)) is None
