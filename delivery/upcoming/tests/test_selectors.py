"""The upcoming list: who is greeted, where, when and in which words, and why not elsewhere."""

from datetime import time, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone

from delivery.upcoming.selectors import (
    LeftOutReason,
    UpcomingFilterError,
    destination_upcoming_digests,
    recipient_upcoming,
    upcoming_list,
)
from delivery.upcoming.tests.helpers import born, destination, digest_destination, in_days
from scheduling.models import CelebrationDefault, MessageTemplate
from users.models import CelebrationChoice

pytestmark = pytest.mark.django_db

BERLIN = ZoneInfo("Europe/Berlin")
LOS_ANGELES = ZoneInfo("America/Los_Angeles")


def _names(page) -> list[str]:
    return [o.name for o in page.occurrences]


def test_each_occurrence_is_placed_as_a_message_at_the_recipients_time_and_in_a_digest_at_the_destinations():
    born(3, first="Ada", timezone="America/Los_Angeles")
    chat = destination("chat", event_types=["BIRTHDAY"])
    digest = digest_destination("berlin-digest", event_types=["BIRTHDAY"])

    (ada,) = upcoming_list(now=timezone.now()).occurrences

    by_destination = {p.destination_id: p for p in ada.placements}
    message = by_destination[chat.pk]
    assert not message.digest
    assert (message.at_local.date(), message.at_local.time()) == (in_days(3), time(9, 0))
    assert str(message.at_local.tzinfo) == "America/Los_Angeles"
    named = by_destination[digest.pk]
    assert named.digest and named.digest_date == in_days(3)
    assert (named.at_local.date(), named.at_local.time(), str(named.at_local.tzinfo)) == (
        in_days(3),
        time(9, 30),
        "Europe/Berlin",
    )
    assert named.text == "Ada Lovelace's birthday"
    assert ada.left_out == ()


def test_the_window_and_the_order_are_the_send_times():
    born(2, first="Later")
    born(1, first="Sooner")
    born(20, first="Outside")
    destination("chat")

    assert _names(upcoming_list(now=timezone.now(), days=14)) == ["Sooner Lovelace", "Later Lovelace"]
    assert "Outside Lovelace" in _names(upcoming_list(now=timezone.now(), days=30))


def test_pages_follow_one_another_by_cursor_without_repeating_or_skipping():
    for n in range(5):
        born(1 + n, first=f"P{n}")
    destination("chat")
    now = timezone.now()

    first = upcoming_list(now=now, limit=2)
    second = upcoming_list(now=now, limit=2, cursor=first.next_cursor)
    third = upcoming_list(now=now, limit=2, cursor=second.next_cursor)

    assert _names(first) + _names(second) + _names(third) == [f"P{n} Lovelace" for n in range(5)]
    assert third.next_cursor is None


def test_pages_through_many_greetings_at_one_instant_take_each_once():
    # given five people greeted at the same instant (09:00 Berlin on one date) and one the day after
    for n in range(5):
        born(2, first=f"Same{n}")
    born(3, first="After")
    destination("chat")
    now = timezone.now()

    seen, cursor = [], None
    for _ in range(4):
        page = upcoming_list(now=now, limit=2, cursor=cursor)
        seen += _names(page)
        cursor = page.next_cursor
        if cursor is None:
            break

    assert sorted(seen[:5]) == [f"Same{n} Lovelace" for n in range(5)]
    assert seen[5:] == ["After Lovelace"]


def test_a_paused_recipient_is_left_out_everywhere_with_the_reason():
    born(2, first="Paused", paused_at=timezone.now(), paused_by="ops")
    destination("chat")

    (occurrence,) = upcoming_list(now=timezone.now()).occurrences

    assert occurrence.placements == ()
    assert [(r.destination_id, r.reason) for r in occurrence.left_out] == [
        (None, LeftOutReason.RECIPIENT_PAUSED)
    ]


def test_a_person_not_celebrated_and_one_celebrated_privately_say_so():
    hidden = born(2, first="Hidden")
    private = born(3, first="Private")
    CelebrationChoice.objects.create(user=hidden, event_type="BIRTHDAY", visibility="none")
    CelebrationChoice.objects.create(user=private, event_type="BIRTHDAY", visibility="private")
    channel = destination("channel")
    inbox = destination("inbox", personal=True)
    digest = digest_destination("digest")

    hidden_row, private_row = upcoming_list(now=timezone.now()).occurrences

    assert [r.reason for r in hidden_row.left_out] == [LeftOutReason.NOT_CELEBRATED]
    assert [p.destination_id for p in private_row.placements] == [inbox.pk]
    assert {(r.destination_id, r.reason) for r in private_row.left_out} == {
        (channel.pk, LeftOutReason.PRIVATE),
        (digest.pk, LeftOutReason.PRIVATE),
    }


def test_a_person_who_left_one_destination_is_left_out_there_saying_so_and_stays_elsewhere():
    from delivery.models import DestinationOptOut

    ada = born(2, first="Ada")
    general, platform = destination("general"), destination("platform")
    digest = digest_destination("digest")
    for left in (general, digest):
        DestinationOptOut.objects.create(
            user=ada, destination=left, created_at=timezone.now(), changed_by="person"
        )

    (occurrence,) = upcoming_list(now=timezone.now()).occurrences

    assert [p.destination_id for p in occurrence.placements] == [platform.pk]
    assert {(r.destination_id, r.reason) for r in occurrence.left_out} == {
        (general.pk, LeftOutReason.OPTED_OUT),
        (digest.pk, LeftOutReason.OPTED_OUT),
    }


def test_a_company_default_of_none_applies_to_whoever_chose_nothing():
    born(2, first="Ada")
    destination("channel")
    CelebrationDefault.objects.create(
        event_type="BIRTHDAY", visibility="none", updated_by="ops", updated_at=timezone.now()
    )

    (row,) = upcoming_list(now=timezone.now()).occurrences

    assert [r.reason for r in row.left_out] == [LeftOutReason.NOT_CELEBRATED]


def test_someone_no_destination_takes_is_not_in_the_audience_and_a_destination_filter_keeps_its_own_people():
    born(2, first="Platform", labels=["team:platform"])
    born(3, first="Data", labels=["team:data"])
    platform = destination("platform", audience_labels=["team:platform"])

    platform_row, data_row = upcoming_list(now=timezone.now()).occurrences
    only = upcoming_list(now=timezone.now(), destination_id=platform.pk)

    assert [p.destination_id for p in platform_row.placements] == [platform.pk]
    assert [r.reason for r in data_row.left_out] == [LeftOutReason.NOT_IN_AUDIENCE]
    assert _names(only) == ["Platform Lovelace"]


def test_filters_by_label_and_type():
    born(2, first="Platform", labels=["team:platform"])
    born(3, first="Data", labels=["team:data"], anniversary_date=in_days(4).replace(year=2015))
    destination("chat")
    now = timezone.now()

    assert _names(upcoming_list(now=now, label="team:data")) == ["Data Lovelace", "Data Lovelace"]
    assert [o.event_type for o in upcoming_list(now=now, event_type="ANNIVERSARY").occurrences] == [
        "ANNIVERSARY"
    ]


def test_an_unknown_destination_or_a_cursor_that_is_not_one_is_refused_naming_the_field():
    with pytest.raises(UpcomingFilterError) as unknown:
        upcoming_list(now=timezone.now(), destination_id=999999)
    with pytest.raises(UpcomingFilterError) as garbled:
        upcoming_list(now=timezone.now(), cursor="yesterday")

    assert (unknown.value.field, garbled.value.field) == ("destination", "cursor")


def test_a_recipient_in_a_language_without_a_template_gets_the_default_and_it_is_said():
    born(2, first="Hans", language="de")
    born(3, first="Jeanne", language="fr")
    MessageTemplate.objects.create(
        event_type="BIRTHDAY", language="fr", body="Bon anniversaire, {first_name} !"
    )
    destination("chat")

    hans, jeanne = upcoming_list(now=timezone.now()).occurrences

    assert (hans.placements[0].language, hans.placements[0].default_language) == ("", True)
    assert (jeanne.placements[0].language, jeanne.placements[0].default_language) == ("fr", False)
    assert jeanne.placements[0].text == "Bon anniversaire, Jeanne !"


def test_a_recipients_next_greetings_name_where_when_and_the_words():
    ada = born(40, first="Ada", year=1990)
    destination("chat")

    (next_one,) = recipient_upcoming(user_id=ada.pk, now=timezone.now())

    assert next_one.occurrence_date == in_days(40)
    assert next_one.placements[0].destination_name == "chat"
    assert "Ada" in next_one.placements[0].text


def test_a_destinations_next_digests_carry_the_names_of_their_dates_only_public_in_audience_unpaused():
    born(1, first="Ada", labels=["team:platform"])
    born(1, first="Grace", last="Hopper", labels=["team:platform"], paused_at=timezone.now(), paused_by="ops")
    born(1, first="Data", labels=["team:data"])
    born(2, first="Linus", last="Torvalds", labels=["team:platform"])
    digest = digest_destination("platform", audience_labels=["team:platform"])

    coming = destination_upcoming_digests(destination=digest, now=timezone.now(), count=3)

    names = {d.local_date: [o.name for o in d.occurrences] for d in coming}
    assert names[in_days(1)] == ["Ada Lovelace"]
    assert names[in_days(2)] == ["Linus Torvalds"]
    assert all(d.at_local.time() == time(9, 30) for d in coming)
    assert coming[0].local_date <= in_days(1)


def test_a_digest_date_already_built_is_said_for_an_occurrence_of_that_date():
    day_after = born(1, first="Ada")
    digest = digest_destination("digest")
    # as if the digest of tomorrow had been built already
    digest.next_digest_date = in_days(2)
    digest.next_digest_at = digest.next_digest_at + timedelta(days=2)
    digest.save()

    (row,) = upcoming_list(now=timezone.now(), destination_id=digest.pk).occurrences

    assert row.recipient_id == day_after.pk
    assert [r.reason for r in row.left_out] == [LeftOutReason.DIGEST_BUILT]


def test_a_personal_email_destination_leaves_out_whoever_has_no_usable_address_saying_so():
    from delivery.destinations.fields import DestinationSettings
    from delivery.destinations.services import destination_create
    from users.services import recipient_email_undeliverable_mark

    born(2, first="Ada", email="ada@example.com")
    born(3, first="Grace")
    born(4, first="Alan", email="alan@example.com")
    recipient_email_undeliverable_mark(email="alan@example.com", reason="550 no such user")
    inbox = destination_create(
        settings=DestinationSettings(
            name="inbox",
            url="smtps://relay.example.com",
            format="email",
            personal=True,
            email_from="hi@example.com",
        ),
        operator="ops",
    ).destination
    chat = destination("chat")

    ada, grace, alan = upcoming_list(now=timezone.now()).occurrences

    assert [p.destination_id for p in ada.placements] == [inbox.pk, chat.pk]
    for left in (grace, alan):
        assert [p.destination_id for p in left.placements] == [chat.pk]
        assert [(r.destination_id, r.reason) for r in left.left_out] == [(inbox.pk, LeftOutReason.NO_EMAIL)]
