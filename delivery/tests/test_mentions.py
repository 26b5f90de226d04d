"""Mentions end to end: a chat message notifies the person it greets, where they agreed, and nobody else.

Recipients are made through the API with their Slack, Discord and Teams ids and
their consent; the scheduler and the worker send to local receivers shaped like
Slack, Discord and Teams Workflows (kinds.tests.receivers), each reporting whom
what it takes would notify (a member id, a snowflake, a Teams user; or a crowd:
`!channel`, `@everyone`). One message per greeting, then a digest naming several
people; then erasure, export and a resend after a change of mind.
"""

from __future__ import annotations

import io
from collections import Counter
from contextlib import ExitStack
from datetime import date, timedelta

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.db import DataError, IntegrityError, connection, transaction
from django.urls import reverse
from django.utils import timezone

from delivery.actions.resend import delivery_resend
from delivery.destinations.fields import DestinationSettings
from delivery.destinations.services import destination_create
from delivery.dispatch.scheduler import Scheduler
from delivery.models import Delivery, DeliveryAttempt, DeliveryStatus, Destination, Digest
from delivery.receivers.tests.test_chat_receivers import all_ended, work_until
from delivery.tests.pipeline import make_due
from kinds.tests.receivers import (
    Judgement,
    ShapedReceiver,
    discord_receiver,
    judge_discord,
    judge_slack,
    slack_receiver,
    teams_receiver,
)
from scheduling.models import Event, EventStatus
from users.models import User
from users.selectors import user_export
from users.services import recipient_mentions_set, user_erase

pytestmark = pytest.mark.django_db

FORMATS = ("slack", "discord", "teams")
ID_FIELDS = {"slack": "slack_user_id", "discord": "discord_user_id", "teams": "teams_user_id"}

# Each person by their last name (which the greeting shows), with their ids and their say.
# The first names are what a name can do to ping a crowd in each format.
PEOPLE = {
    "Agreed": {
        "first_name": "Ada",
        "mention_consent": True,
        "slack_user_id": "U024BE7LH",
        "discord_user_id": "123456789012345678",
        "teams_user_id": "ada@example.com",
    },
    "Channel": {
        "first_name": "<!channel> <!here> <@U999999999>",
        "mention_consent": True,
        "slack_user_id": "W0CHANNEL1",
        "discord_user_id": "223456789012345678",
        "teams_user_id": "8C2F5A7E-1B3D-4E6F-9A0B-2C4D6E8F0A1B",
    },
    "Everyone": {
        "first_name": "@everyone @here <@323456789012345678> <at>All</at>",
        "mention_consent": True,
        "slack_user_id": "U0EVERY01",
        "discord_user_id": "423456789012345678",
        "teams_user_id": "every.one@example.com",
    },
    "Refused": {
        "first_name": "Grace",
        "mention_consent": False,
        "slack_user_id": "U0GRACE01",
        "discord_user_id": "523456789012345678",
        "teams_user_id": "grace@example.com",
    },
    "Silent": {
        "first_name": "Linus",
        "mention_consent": None,
        "slack_user_id": "U0LINUS01",
        "discord_user_id": "623456789012345678",
        "teams_user_id": "linus@example.com",
    },
    "Noid": {"first_name": "Ken", "mention_consent": True},
}


def stored_id(last_name: str, format_: str) -> str | None:
    """The id a person's mention at `format_`'s service names (as stored: an object id in lower case)."""
    value = PEOPLE[last_name].get(ID_FIELDS[format_])
    return value.lower() if value and format_ == "teams" and "@" not in value else value


def agreed(last_name: str, *, by_default: bool) -> bool:
    consent = PEOPLE[last_name]["mention_consent"]
    return by_default if consent is None else consent


@pytest.fixture
def chat(delivery_settings):
    delivery_settings.WEBHOOK_URL = ""
    with ExitStack() as stack:
        yield lambda receiver: stack.enter_context(receiver)


def destination_at(receiver: ShapedReceiver, format_: str, **fields) -> Destination:
    return destination_create(
        settings=DestinationSettings(
            name=fields.pop("name", format_), url=receiver.url, format=format_, max_rate=50, **fields
        ),
        operator="ops",
    ).destination


def create_people(api_client, *, born: date) -> dict[str, str]:
    """Everyone of PEOPLE through the API, born on `born`'s day; their ids by last name."""
    ids = {}
    for last_name, fields in PEOPLE.items():
        response = api_client.post(
            "/api/v1/users/",
            {
                **fields,
                "last_name": last_name,
                "date_of_birth": date(1990, born.month, born.day).isoformat(),
                "timezone": "UTC",
            },
            format="json",
        )
        assert response.status_code == 201, response.content
        ids[last_name] = response.json()["id"]
    return ids


def whose(shown: str) -> str:
    """The last name of the one person a greeting names."""
    (name,) = [last_name for last_name in PEOPLE if last_name in shown]
    return name


@pytest.mark.parametrize("by_default", [False, True], ids=["default-no", "default-yes"])
def test_each_chat_service_mentions_the_person_greeted_once_where_they_agreed_and_nobody_else(
    api_client, chat, settings, by_default
):
    # given the company's default, a Slack, a Discord and a Teams destination that mention, and a
    # Slack one left as destinations are by default (mentioning nobody)
    settings.MENTIONS_BY_DEFAULT = by_default
    receivers = {
        format_: chat(make())
        for format_, make in zip(FORMATS, (slack_receiver, discord_receiver, teams_receiver), strict=True)
    }
    for format_, receiver in receivers.items():
        destination_at(receiver, format_, mention_recipient=True)
    plain = chat(slack_receiver())
    destination_at(plain, "slack", name="plain slack")

    # when everyone's birthday greeting is due and sent
    today = timezone.now().date()
    create_people(api_client, born=date(1990, today.month, min(today.day, 28)))
    make_due(list(Event.objects.filter(status=EventStatus.PENDING, event_type="BIRTHDAY")))
    Scheduler(once=True).run()
    work_until(all_ended)

    # then every service took one greeting per person, each mentioning exactly the person it greets if
    # they agreed and have an id there, and nobody at all otherwise: no crowd, nobody a name names
    assert set(Delivery.objects.values_list("status", flat=True)) == {DeliveryStatus.DELIVERED}
    for format_, receiver in receivers.items():
        assert receiver.refused == [] and len(receiver.taken) == len(PEOPLE), format_
        seen = Counter()
        for judgement in receiver.taken:
            person = whose(judgement.shown)
            seen[person] += 1
            wanted = stored_id(person, format_) if agreed(person, by_default=by_default) else None
            assert judgement.mentioned == ((wanted,) if wanted else ()), (format_, person)
        assert seen == Counter(list(PEOPLE)), format_
    assert sum(j.mentions for j in plain.taken) == 0 and len(plain.taken) == len(PEOPLE)

    # and the bodies say it as each service documents: Discord allows that one user and parses nothing
    # else; Teams has the one entity, its <at> in a TextBlock of its own
    for received in receivers["discord"].received:
        person = whose(judge_discord(received.raw_body).shown)
        wanted = stored_id(person, "discord") if agreed(person, by_default=by_default) else None
        assert received.body["allowed_mentions"] == (
            {"parse": [], "users": [wanted]} if wanted else {"parse": []}
        )
    for received in receivers["teams"].received:
        card = received.body["attachments"][0]["content"]
        entities = card.get("msteams", {}).get("entities", [])
        assert len(entities) <= 1
        if entities:
            (mention_block,) = [b for b in card["body"] if b["type"] == "TextBlock"]
            assert mention_block["text"] == entities[0]["text"]
            assert "<" not in entities[0]["text"].removeprefix("<at>").removesuffix("</at>")


def test_a_digest_mentions_each_person_it_names_who_agreed_once_however_many_lines_name_them(
    api_client, chat, settings
):
    # given digest destinations that mention, on each service, and a date three days ahead on which
    # everyone is born, Ada also married
    settings.MENTIONS_BY_DEFAULT = False
    day = timezone.now().date() + timedelta(days=3)
    receivers = {
        format_: chat(make())
        for format_, make in zip(FORMATS, (slack_receiver, discord_receiver, teams_receiver), strict=True)
    }
    destinations = [
        destination_at(receiver, format_, mention_recipient=True, digest_time="09:00", digest_timezone="UTC")
        for format_, receiver in receivers.items()
    ]
    ids = create_people(api_client, born=day)
    married = api_client.patch(
        f"/api/v1/users/{ids['Agreed']}/",
        {"anniversary_date": date(2015, day.month, day.day).isoformat()},
        format="json",
    )
    assert married.status_code == 200, married.content

    # when that date's digests are due (the test's clock: their time is now) and sent
    Destination.objects.filter(pk__in=[d.pk for d in destinations]).update(
        next_digest_date=day, next_digest_at=timezone.now()
    )
    Scheduler(once=True).run()
    work_until(all_ended)

    # then each service took one message naming everyone's occurrences, and mentioning each who
    # agreed and has an id there exactly once (Ada's two lines, one mention), nobody else
    assert Digest.objects.count() == len(FORMATS)
    for format_, receiver in receivers.items():
        assert receiver.refused == [] and len(receiver.taken) == 1, format_
        (judgement,) = receiver.taken
        # Ada's two lines (the mention's own block in Teams names her a third time, between <at> tags)
        assert judgement.shown.count("Ada Agreed") - judgement.shown.count("<at>Ada Agreed</at>") == 2
        assert all(last_name in judgement.shown for last_name in PEOPLE)
        wanted = [
            stored_id(p, format_) for p in PEOPLE if agreed(p, by_default=False) and stored_id(p, format_)
        ]
        assert Counter(judgement.mentioned) == Counter(wanted), format_
        assert len(wanted) == 3  # Ada, and the two whose names try to ping a crowd


def test_a_resend_after_the_person_withdrew_mentions_nobody_and_the_ids_go_with_an_erasure(
    api_client, chat, settings
):
    # given Ada, who agreed, greeted on Slack with a mention that Slack refused for good (DEAD)
    settings.MENTIONS_BY_DEFAULT = False
    receiver = chat(slack_receiver())
    receiver.judge = lambda raw: Judgement(400, b"invalid_payload")
    destination_at(receiver, "slack", mention_recipient=True)
    today = timezone.now().date()
    response = api_client.post(
        "/api/v1/users/",
        {
            **PEOPLE["Agreed"],
            "last_name": "Agreed",
            "date_of_birth": date(1990, today.month, min(today.day, 28)).isoformat(),
            "timezone": "UTC",
        },
        format="json",
    )
    user = User.objects.get(pk=response.json()["id"])
    make_due(list(Event.objects.filter(status=EventStatus.PENDING, event_type="BIRTHDAY")))
    Scheduler(once=True).run()
    work_until(all_ended)
    assert Delivery.objects.get().status == DeliveryStatus.DEAD
    assert judge_slack(receiver.received[0].raw_body).mentioned == ("U024BE7LH",)

    # and her export holds her ids and her say
    exported = user_export(user_id=user.pk)["recipient"]
    assert {field: exported[field] for field in ("slack_user_id", "discord_user_id", "teams_user_id")} == {
        "slack_user_id": "U024BE7LH",
        "discord_user_id": "123456789012345678",
        "teams_user_id": "ada@example.com",
    }
    assert exported["mention_consent"] is True

    # when she withdraws (on her own page, by the service it calls) and the greeting is sent again
    recipient_mentions_set(user=user, changes={"mention_consent": False})
    receiver.judge = judge_slack
    delivery_resend(delivery=Delivery.objects.get(), operator="ops")
    work_until(all_ended)

    # then the resend names her and mentions nobody
    assert len(receiver.taken) == 1 and receiver.taken[0].mentioned == ()
    assert "Agreed" in receiver.taken[0].shown

    # when she is erased, no row holds any of her ids any more
    user_erase(user=user)
    with connection.cursor() as cursor:
        for table in (User, Delivery, DeliveryAttempt, Digest, Event):
            cursor.execute(
                f"SELECT count(*) FROM {table._meta.db_table} t WHERE t::text LIKE %s OR t::text LIKE %s OR t::text LIKE %s",
                ["%U024BE7LH%", "%123456789012345678%", "%ada@example.com%"],
            )
            assert cursor.fetchone() == (0,), table


# --- bad ids, at every door ---------------------------------------------------------------------

BAD = [
    ("slack_user_id", "@ada"),
    ("slack_user_id", "u024be7lh"),
    ("slack_user_id", "<!channel>"),
    ("discord_user_id", "ada#1234"),
    ("discord_user_id", "12345"),
    ("discord_user_id", "<@123456789012345678>"),
    ("teams_user_id", "Ada Lovelace@example.com"),
    ("teams_user_id", "ada lovelace"),
    ("teams_user_id", "<at>ada@example.com</at>"),
]
NEW = {"first_name": "Ada", "last_name": "Lovelace", "date_of_birth": "1990-03-14", "timezone": "UTC"}


@pytest.mark.parametrize(("field", "value"), BAD)
def test_the_api_refuses_a_bad_id_with_a_400_naming_the_field_and_stores_nothing(api_client, field, value):
    created = api_client.post("/api/v1/users/", {**NEW, field: value}, format="json")
    assert created.status_code == 400 and list(created.json()) == [field], created.content
    assert not User.objects.exists()

    user = api_client.post("/api/v1/users/", {**NEW, "slack_user_id": "U024BE7LH"}, format="json").json()
    changed = api_client.patch(f"/api/v1/users/{user['id']}/", {field: value}, format="json")
    assert changed.status_code == 400 and list(changed.json()) == [field], changed.content
    stored = User.objects.get()
    assert (stored.slack_user_id, stored.discord_user_id, stored.teams_user_id, stored.version) == (
        "U024BE7LH",
        "",
        "",
        1,
    )


def test_the_api_refuses_a_consent_that_is_not_a_boolean_or_null(api_client):
    response = api_client.post("/api/v1/users/", {**NEW, "mention_consent": "yes"}, format="json")
    assert response.status_code == 400 and list(response.json()) == ["mention_consent"]
    assert not User.objects.exists()


def test_the_api_stores_ids_trimmed_and_an_object_id_in_lower_case_and_null_clears_them(api_client):
    response = api_client.post(
        "/api/v1/users/",
        {
            **NEW,
            "slack_user_id": " U024BE7LH ",
            "discord_user_id": "123456789012345678",
            "teams_user_id": "8C2F5A7E-1B3D-4E6F-9A0B-2C4D6E8F0A1B",
            "mention_consent": True,
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["slack_user_id"] == "U024BE7LH"
    assert body["teams_user_id"] == "8c2f5a7e-1b3d-4e6f-9a0b-2c4d6e8f0a1b"
    cleared = api_client.patch(
        f"/api/v1/users/{body['id']}/",
        {"slack_user_id": None, "discord_user_id": "", "mention_consent": None},
        format="json",
    ).json()
    assert (cleared["slack_user_id"], cleared["discord_user_id"], cleared["mention_consent"]) == (
        "",
        "",
        None,
    )


@pytest.mark.parametrize(("field", "value"), BAD)
def test_the_import_refuses_a_bad_id_naming_its_line_and_column_and_imports_nothing(tmp_path, field, value):
    path = tmp_path / "people.csv"
    value_cell = '"' + value.replace('"', '""') + '"'
    path.write_text(
        f"first_name,last_name,date_of_birth,timezone,{field}\n"
        f"Grace,Hopper,1990-01-01,UTC,\n"
        f"Ada,Lovelace,1990-03-14,UTC,{value_cell}\n",
        encoding="utf-8",
    )
    stderr = io.StringIO()
    with pytest.raises(CommandError):
        call_command("import_users", str(path), stdout=io.StringIO(), stderr=stderr)
    assert f"line 3: {field}: " in stderr.getvalue()
    assert not User.objects.exists()


def test_the_import_takes_ids_and_consent_and_an_empty_cell_is_none(tmp_path):
    path = tmp_path / "people.csv"
    path.write_text(
        "first_name,last_name,date_of_birth,timezone,slack_user_id,discord_user_id,teams_user_id,mention_consent\n"
        "Ada,Lovelace,1990-03-14,UTC,U024BE7LH,123456789012345678,ada@example.com,yes\n"
        "Grace,Hopper,1990-01-01,UTC,,,,\n"
        "Linus,T,1990-01-01,UTC,,,,no\n",
        encoding="utf-8",
    )
    call_command("import_users", str(path), stdout=io.StringIO(), stderr=io.StringIO())
    rows = {u.first_name: u for u in User.objects.all()}
    assert (rows["Ada"].slack_user_id, rows["Ada"].discord_user_id, rows["Ada"].teams_user_id) == (
        "U024BE7LH",
        "123456789012345678",
        "ada@example.com",
    )
    assert [rows[name].mention_consent for name in ("Ada", "Grace", "Linus")] == [True, None, False]


def test_the_import_refuses_a_consent_cell_it_cannot_read(tmp_path):
    path = tmp_path / "people.csv"
    path.write_text(
        "first_name,last_name,date_of_birth,timezone,mention_consent\nAda,Lovelace,1990-03-14,UTC,perhaps\n",
        encoding="utf-8",
    )
    stderr = io.StringIO()
    with pytest.raises(CommandError):
        call_command("import_users", str(path), stdout=io.StringIO(), stderr=stderr)
    assert "line 2: mention_consent: " in stderr.getvalue()
    assert not User.objects.exists()


@pytest.mark.parametrize(("field", "value"), BAD)
def test_the_console_refuses_a_bad_id_on_its_field_and_saves_nothing(console, field, value):
    response = console.post(
        reverse("admin:users_user_add"),
        {
            "first_name": "Ada",
            "last_name": "Lovelace",
            "date_of_birth": "1990-03-14",
            "timezone": "UTC",
            field: value,
        },
    )
    assert response.status_code == 200
    assert list(response.context["adminform"].form.errors) == [field]
    assert not User.objects.exists()


def test_the_console_saves_ids_and_consent(console):
    response = console.post(
        reverse("admin:users_user_add"),
        {
            **NEW,
            "slack_user_id": "U024BE7LH",
            "discord_user_id": "123456789012345678",
            "teams_user_id": "ada@example.com",
            "mention_consent": "true",
        },
    )
    assert response.status_code == 302, response.context["adminform"].form.errors
    user = User.objects.get()
    assert (user.slack_user_id, user.mention_consent) == ("U024BE7LH", True)


@pytest.mark.parametrize(("field", "value"), BAD)
def test_the_service_for_the_persons_own_page_refuses_a_bad_id_naming_it_and_stores_nothing(field, value):
    from users.services import user_create

    user = user_create(
        first_name="Ada", last_name="Lovelace", date_of_birth=date(1990, 3, 14), timezone="UTC"
    )
    with pytest.raises(ValidationError) as refused:
        recipient_mentions_set(user=user, changes={field: value, "mention_consent": True})
    assert list(refused.value.message_dict) == [field]
    stored = User.objects.get()
    assert (getattr(stored, field), stored.mention_consent, stored.version) == ("", None, 1)


def test_the_service_for_the_persons_own_page_changes_nothing_but_mentions():
    from users.services import user_create

    user = user_create(
        first_name="Ada", last_name="Lovelace", date_of_birth=date(1990, 3, 14), timezone="UTC"
    )
    with pytest.raises(ValueError, match="first_name"):
        recipient_mentions_set(user=user, changes={"first_name": "Eve"})
    changed = recipient_mentions_set(
        user=user, changes={"teams_user_id": "ada@example.com", "mention_consent": True}
    )
    assert (changed.teams_user_id, changed.mention_consent, changed.first_name) == (
        "ada@example.com",
        True,
        "Ada",
    )


@pytest.mark.parametrize(("field", "value"), BAD)
def test_the_database_refuses_a_bad_id_written_around_the_services(field, value):
    from users.services import user_create

    user = user_create(
        first_name="Ada", last_name="Lovelace", date_of_birth=date(1990, 3, 14), timezone="UTC"
    )
    # Its shape's check, or its column's length for one too long to be any id.
    with pytest.raises((IntegrityError, DataError)), transaction.atomic():
        User.objects.filter(pk=user.pk).update(**{field: value})


# --- the destination's switch -----------------------------------------------------------------


@pytest.mark.parametrize("format_", ["standard", "teams_messagecard"])
def test_only_a_chat_destination_may_mention_a_400_naming_the_field_otherwise(api_client, format_):
    response = api_client.post(
        "/api/v1/destinations/",
        {"name": "x", "url": "https://hooks.example.com/x", "format": format_, "mention_recipient": True},
        format="json",
    )
    assert response.status_code == 400 and list(response.json()) == ["mention_recipient"], response.content
    assert not Destination.objects.exists()


def test_a_mentioning_destination_cannot_become_a_kind_that_does_not_mention(api_client):
    created = api_client.post(
        "/api/v1/destinations/",
        {"name": "x", "url": "https://hooks.example.com/x", "format": "slack", "mention_recipient": True},
        format="json",
    )
    assert created.status_code == 201, created.content
    assert created.json()["mention_recipient"] is True
    changed = api_client.patch(
        f"/api/v1/destinations/{created.json()['id']}/", {"format": "standard"}, format="json"
    )
    assert changed.status_code == 400 and list(changed.json()) == ["mention_recipient"]
    assert Destination.objects.get().format == "slack"
    refused = api_client.patch(
        f"/api/v1/destinations/{created.json()['id']}/", {"mention_recipient": "yes"}, format="json"
    )
    assert refused.status_code == 400 and list(refused.json()) == ["mention_recipient"]


def test_a_destination_mentions_nobody_unless_set_to(api_client):
    created = api_client.post(
        "/api/v1/destinations/",
        {"name": "x", "url": "https://hooks.example.com/x", "format": "discord"},
        format="json",
    )
    assert created.json()["mention_recipient"] is False


def test_the_database_refuses_a_mentioning_destination_of_a_kind_that_does_not_mention():
    destination = destination_create(
        settings=DestinationSettings(
            name="x", url="https://hooks.example.com/x", format="slack", mention_recipient=True
        ),
        operator="ops",
    ).destination
    with pytest.raises(IntegrityError), transaction.atomic():
        Destination.objects.filter(pk=destination.pk).update(format="standard")


def test_the_console_sets_a_destination_to_mention_and_refuses_it_on_a_format_that_cannot(console):
    form = {
        "name": "team-slack",
        "url": "https://hooks.example.org/slack",
        "event_types": ["BIRTHDAY"],
        "enabled": "on",
        "mention_recipient": "on",
        "secret": "",
    }
    refused = console.post(reverse("admin:delivery_destination_add"), {**form, "format": "standard"})
    assert refused.status_code == 200
    assert list(refused.context["adminform"].form.errors) == ["mention_recipient"]
    assert not Destination.objects.exists()

    console.post(reverse("admin:delivery_destination_add"), {**form, "format": "slack"})
    assert Destination.objects.get().mention_recipient is True


# --- the claim's cost ---------------------------------------------------------------------------


def _claim_queries(count: int) -> int:
    from django.test.utils import CaptureQueriesContext

    from delivery.dispatch.claim import deliveries_enqueue_due

    make_due()
    with CaptureQueriesContext(connection) as captured:
        assert deliveries_enqueue_due(batch_size=count).queued == count
    return len(captured.captured_queries)


def test_the_claim_reads_mentions_in_one_query_a_batch_and_none_while_no_destination_mentions(settings):
    # given 80 recipients who agreed, with Slack ids, and a Slack destination mentioning no one
    from users.services import users_bulk_create_with_events

    settings.MENTIONS_BY_DEFAULT = True
    users_bulk_create_with_events(
        rows=[
            {
                "first_name": f"U{i}",
                "last_name": "Load",
                "date_of_birth": date(1990, 1 + i % 12, 1 + i % 28),
                "timezone": "UTC",
                "slack_user_id": f"U{i:08d}",
            }
            for i in range(80)
        ]
    )
    destination = destination_create(
        settings=DestinationSettings(name="s", url="https://hooks.example.com/s", format="slack"),
        operator="ops",
    ).destination
    quiet = _claim_queries(40)
    assert "<@" not in json_of(Delivery.objects.all())

    # when the destination mentions, the next batch of 40 costs one query more, and mentions each
    Destination.objects.filter(pk=destination.pk).update(mention_recipient=True)
    Delivery.objects.all().delete()
    assert _claim_queries(40) == quiet + 1
    texts = [d.payload["text"] for d in Delivery.objects.all()]
    assert len(texts) == 40 and all(text.startswith("<@U") and text.count("<@") == 1 for text in texts)


def json_of(deliveries) -> str:
    import json

    return json.dumps([d.payload for d in deliveries])
