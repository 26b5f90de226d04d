"""Destinations' audiences: whom each greets, applied when an occurrence is claimed."""

from datetime import date, timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from delivery.destinations.audience import Audience, DestinationRouter
from delivery.destinations.fields import DestinationSettings
from delivery.destinations.selectors import destination_recipients
from delivery.destinations.services import destination_create, destination_update
from delivery.dispatch.scheduler import Scheduler
from delivery.models import Delivery, Destination
from delivery.tests.pipeline import make_due
from scheduling.models import EventStatus, EventType
from users.models import User
from users.services import user_create, user_update

pytestmark = pytest.mark.django_db

DESTINATIONS_URL = "/api/v1/destinations/"


def new_destination(name: str, **fields) -> Destination:
    return destination_create(
        settings=DestinationSettings(name=name, url=f"https://{name}.example.org/hook", **fields),
        operator="ops",
    ).destination


def due_recipient(first_name: str, labels: list[str], **fields) -> User:
    user = user_create(
        first_name=first_name,
        last_name="Doe",
        date_of_birth=date(1990, 3, 8),
        timezone="Europe/Berlin",
        labels=labels,
        **fields,
    )
    make_due(list(user.events.all()))
    return user


def destinations_of(user: User) -> set[str]:
    return set(Delivery.objects.filter(event__user=user).values_list("destination__name", flat=True))


# --- the rule --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("any_of", "none_of", "labels", "greeted"),
    [
        ((), (), [], True),
        ((), (), ["team:data"], True),
        (("team:platform",), (), ["team:platform", "office:berlin"], True),
        (("team:platform", "team:data"), (), ["team:data"], True),
        (("team:platform",), (), ["team:data"], False),
        (("team:platform",), (), [], False),
        (("team:platform",), ("contractor",), ["contractor", "team:platform"], False),
        ((), ("contractor",), ["contractor"], False),
        ((), ("contractor",), ["team:data"], True),
    ],
)
def test_an_audience_takes_anyone_with_any_of_its_labels_and_none_of_its_exclusions(
    any_of, none_of, labels, greeted
):
    audience = Audience(frozenset(any_of), frozenset(none_of))

    assert audience.includes(labels) is greeted


@pytest.mark.parametrize(
    ("any_of", "none_of"),
    [
        ((), ()),
        (("team:platform",), ()),
        (("team:platform", "team:data"), ("contractor",)),
        ((), ("contractor",)),
    ],
)
def test_an_audiences_query_of_recipients_finds_exactly_whom_it_includes(any_of, none_of):
    # given recipients holding every combination of the labels in play
    label_sets = [[], ["team:platform"], ["team:data"], ["contractor"], ["contractor", "team:platform"]]
    users = {
        user_create(
            first_name=f"R{i}", last_name="L", date_of_birth=date(1990, 1, 1), timezone="UTC", labels=labels
        ).pk: labels
        for i, labels in enumerate(label_sets)
    }
    audience = Audience(frozenset(any_of), frozenset(none_of))

    # then the query and the claim's rule agree on every one
    found = set(User.objects.filter(audience.recipient_filter()).values_list("pk", flat=True))
    assert found == {pk for pk, labels in users.items() if audience.includes(labels)}


def test_a_destinations_recipients_are_those_its_audience_holds():
    platform = new_destination("platform", audience_labels=["team:platform"], excluded_labels=["contractor"])
    everyone = new_destination("everyone")
    ada = user_create(
        first_name="Ada",
        last_name="L",
        date_of_birth=date(1990, 1, 1),
        timezone="UTC",
        labels=["team:platform"],
    )
    user_create(
        first_name="Bob",
        last_name="L",
        date_of_birth=date(1990, 1, 1),
        timezone="UTC",
        labels=["team:platform", "contractor"],
    )

    assert list(destination_recipients(destination=platform)) == [ada]
    assert destination_recipients(destination=everyone).count() == 2


def test_the_router_memo_answers_each_type_and_label_set_alike():
    everyone = new_destination("everyone")
    platform = new_destination("platform", audience_labels=["team:platform"], event_types=["BIRTHDAY"])
    router = DestinationRouter([everyone, platform])

    assert router.targets(event_type="BIRTHDAY", labels=["team:platform"]) == (everyone, platform)
    assert router.targets(event_type="ANNIVERSARY", labels=["team:platform"]) == (everyone,)
    assert router.targets(event_type="BIRTHDAY", labels=["team:platform"]) == (everyone, platform)


# --- the claim -------------------------------------------------------------------------


def test_each_occurrence_goes_to_the_destinations_whose_audience_holds_its_recipient_once_each():
    # given three team channels, one for everyone and one for everyone but contractors
    new_destination("platform", audience_labels=["team:platform"], format="slack")
    new_destination("data", audience_labels=["team:data"], format="slack")
    new_destination("leads", audience_labels=["lead", "team:design"], format="teams")
    new_destination("everyone")
    new_destination("staff", excluded_labels=["contractor"])
    ada = due_recipient("Ada", ["team:platform", "lead"])
    bob = due_recipient("Bob", ["team:data", "contractor"])
    cy = due_recipient("Cy", [])

    # when the occurrences are claimed
    Scheduler(once=True).run()

    # then each went to exactly its destinations, one delivery each, under the occurrence's key
    assert destinations_of(ada) == {"platform", "leads", "everyone", "staff"}
    assert destinations_of(bob) == {"data", "everyone"}
    assert destinations_of(cy) == {"everyone", "staff"}
    assert Delivery.objects.filter(event__user=ada).count() == 4
    for delivery in Delivery.objects.all():
        assert delivery.idempotency_key == delivery.event.idempotency_key


def test_an_occurrence_whose_recipient_is_in_no_audience_is_completed_with_the_reason_and_nothing_queued():
    # given only team channels, and a recipient of another team
    new_destination("platform", audience_labels=["team:platform"])
    new_destination("anniversaries-of-data", audience_labels=["team:data"], event_types=["ANNIVERSARY"])
    outsider = due_recipient("Eve", ["team:sales"])

    # when claimed
    Scheduler(once=True).run()

    # then concluded like an occurrence no destination subscribes to, saying why
    event = outsider.events.get(event_type=EventType.BIRTHDAY, status=EventStatus.COMPLETED)
    assert event.failure_reason == (
        "Nothing sent: no enabled destination subscribed to BIRTHDAY events has this recipient in its "
        "audience (labels: team:sales)."
    )
    assert event.executed_at is not None
    assert not Delivery.objects.exists()
    # and the next birthday is scheduled all the same
    assert outsider.events.filter(event_type=EventType.BIRTHDAY, status=EventStatus.PENDING).exists()


def test_a_label_change_applies_to_a_pending_occurrence_at_its_claim_and_not_to_a_claimed_one():
    new_destination("platform", audience_labels=["team:platform"])
    new_destination("data", audience_labels=["team:data"])
    moved = due_recipient("Ada", ["team:data"])
    claimed = due_recipient("Bob", ["team:data"])
    # Bob's occurrence is claimed before his move; Ada's after hers.
    moved.events.update(target_timestamp_utc=timezone.now() + timedelta(days=30))
    Scheduler(once=True).run()

    user_update(user=moved, data={"labels": ["team:platform"]})
    user_update(user=claimed, data={"labels": ["team:platform"]})
    make_due(list(moved.events.filter(status=EventStatus.PENDING)))
    Scheduler(once=True).run()

    assert destinations_of(moved) == {"platform"}
    assert destinations_of(claimed) == {"data"}


def test_an_audience_change_applies_to_the_next_claim():
    platform = new_destination("platform", audience_labels=["team:platform"])
    first = due_recipient("Ada", ["team:data"])
    Scheduler(once=True).run()

    destination_update(destination=platform, operator="ops", changes={"audience_labels": ["team:data"]})
    second = due_recipient("Bob", ["team:data"])
    Scheduler(once=True).run()

    assert destinations_of(first) == set()
    assert destinations_of(second) == {"platform"}


# --- writes ----------------------------------------------------------------------------


def test_an_audience_is_stored_by_the_labels_rule():
    destination = new_destination("platform", audience_labels=["Team:Platform", "team:platform"])

    assert destination.audience_labels == ["team:platform"]


@pytest.mark.parametrize(
    "changes",
    [
        {"audience_labels": ["team platform"]},
        {"excluded_labels": ["x" * 51]},
        {"audience_labels": "team:platform"},
        {"excluded_labels": ["team:platform"]},
    ],
)
def test_a_bad_audience_is_refused_naming_the_field_and_changes_nothing(changes):
    destination = new_destination("platform", audience_labels=["team:platform"])

    with pytest.raises(ValidationError) as refused:
        destination_update(destination=destination, operator="ops", changes=changes)

    assert set(refused.value.message_dict) == set(changes)
    destination.refresh_from_db()
    assert (destination.audience_labels, destination.excluded_labels, destination.version) == (
        ["team:platform"],
        [],
        1,
    )


def test_the_api_sets_shows_and_refuses_an_audience(api_client):
    created = api_client.post(
        DESTINATIONS_URL,
        {
            "name": "platform",
            "url": "https://platform.example.org/hook",
            "audience_labels": ["team:platform"],
            "excluded_labels": ["contractor"],
        },
        format="json",
    )
    assert created.status_code == 201, created.data
    assert (created.data["audience_labels"], created.data["excluded_labels"]) == (
        ["team:platform"],
        ["contractor"],
    )

    url = f"{DESTINATIONS_URL}{created.data['id']}/"
    bad = api_client.patch(url, {"audience_labels": ["not a label"]}, format="json")
    cleared = api_client.patch(url, {"audience_labels": [], "excluded_labels": []}, format="json")

    assert bad.status_code == 400 and set(bad.data) == {"audience_labels"}
    assert cleared.status_code == 200 and cleared.data["audience_labels"] == []


def test_the_openapi_schema_describes_the_audience_and_the_recipients_labels(api_client):
    schema = api_client.get("/api/v1/schema/", {"format": "json"}).json()
    destination = schema["components"]["schemas"]["Destination"]["properties"]
    recipient = schema["components"]["schemas"]["User"]["properties"]

    assert destination["audience_labels"]["type"] == "array"
    assert "excluded_labels" in destination
    assert recipient["labels"]["maxItems"] == 20
    assert "language" in recipient
    parameters = schema["paths"]["/api/v1/users/"]["get"]["parameters"]
    assert "label" in {parameter["name"] for parameter in parameters}
