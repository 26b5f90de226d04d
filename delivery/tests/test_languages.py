"""Words per language, per milestone and per destination, chosen when an occurrence is claimed."""

from datetime import date, timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from delivery.destinations.fields import DestinationSettings
from delivery.destinations.services import destination_create, destination_update
from delivery.dispatch.scheduler import Scheduler
from delivery.models import Delivery
from delivery.tests.pipeline import make_due
from scheduling.models import EventStatus, EventType, MessageTemplate
from scheduling.selectors import message_templates
from scheduling.services.messages import message_template_save
from users.services import user_create

pytestmark = pytest.mark.django_db

DESTINATIONS_URL = "/api/v1/destinations/"


def add_template(
    body: str, *, event_type: str = "BIRTHDAY", language: str = "", milestone: int | None = None
):
    return message_template_save(
        template=MessageTemplate(event_type=event_type, language=language, milestone=milestone, body=body),
        operator="ops",
    )


def due(first_name: str, *, language: str = "", date_of_birth: date = date(1990, 3, 8), **fields):
    user = user_create(
        first_name=first_name,
        last_name="Doe",
        date_of_birth=date_of_birth,
        timezone="Europe/Berlin",
        language=language,
        **fields,
    )
    make_due(list(user.events.all()))
    return user


def messages_of(user, event_type: str = "BIRTHDAY") -> dict[str, str]:
    return {
        d.destination.name: d.payload.get("message", d.payload.get("text"))
        for d in Delivery.objects.filter(event__user=user, event__event_type=event_type).select_related(
            "destination"
        )
    }


@pytest.fixture
def hr():
    return destination_create(
        settings=DestinationSettings(name="hr", url="https://hr.example.org/hook"), operator="ops"
    ).destination


# --- choosing the text -----------------------------------------------------------------


def test_a_recipient_is_greeted_in_their_language_its_base_language_or_else_the_default(hr):
    # given German and Portuguese texts, none in French or Brazilian Portuguese
    add_template("Alles Gute zum Geburtstag, {first_name}!", language="de")
    add_template("Feliz aniversário, {first_name}!", language="pt")
    ada, bia, cleo, dan = (
        due("Ada", language="de"),
        due("Bia", language="pt-BR"),
        due("Cleo", language="fr"),
        due("Dan"),
    )

    # when claimed
    Scheduler(once=True).run()

    # then German, Portuguese (pt for pt-BR), and the default for French and for none
    assert messages_of(ada) == {"hr": "Alles Gute zum Geburtstag, Ada!"}
    assert messages_of(bia) == {"hr": "Feliz aniversário, Bia!"}
    assert messages_of(cleo) == {"hr": "Hey, Cleo Doe it's your birthday"}
    assert messages_of(dan) == {"hr": "Hey, Dan Doe it's your birthday"}


def test_a_milestone_text_greets_its_year_only_and_a_language_text_wins_over_a_default_milestone(hr):
    # given a tenth-anniversary text in the default language and a German any-year one
    add_template("Ten years, {first_name}! 🎉", event_type="ANNIVERSARY", milestone=10)
    add_template("Zehn Jahre, {first_name}!", event_type="ANNIVERSARY", language="de", milestone=10)
    add_template("Alles Gute zum Hochzeitstag, {first_name}!", event_type="ANNIVERSARY", language="de")
    # The next occurrence is two days ahead, in any zone and at any hour: its year counts ten. (Today's
    # date counted eleven once the day's catch-up window had passed, from 20:00 UTC in Berlin.)
    soon = timezone.now().date() + timedelta(days=2)
    if (soon.month, soon.day) == (2, 29):
        soon += timedelta(days=1)  # ten years before a leap year is not one
    tenth = soon.replace(year=soon.year - 10)
    ten = due("Ten", anniversary_date=tenth)
    ten_de = due("Zehn", language="de", anniversary_date=tenth)
    five_de = due("Fuenf", language="de", anniversary_date=tenth.replace(year=tenth.year + 5))
    five = due("Five", anniversary_date=tenth.replace(year=tenth.year + 5))

    Scheduler(once=True).run()

    anniversaries = {u.first_name: messages_of(u, "ANNIVERSARY")["hr"] for u in (ten, ten_de, five_de, five)}
    assert anniversaries == {
        "Ten": "Ten years, Ten! 🎉",
        "Zehn": "Zehn Jahre, Zehn!",
        "Fuenf": "Alles Gute zum Hochzeitstag, Fuenf!",
        "Five": "Hey, Five Doe happy anniversary",
    }


def test_a_destination_with_its_own_text_gets_it_and_the_others_the_templates_under_one_key(hr):
    add_template("Alles Gute zum Geburtstag, {first_name}!", language="de")
    destination_create(
        settings=DestinationSettings(
            name="chat",
            url="https://chat.example.org/hook",
            format="slack",
            message_overrides={"BIRTHDAY": "🎂 Happy birthday, {first_name}!"},
        ),
        operator="ops",
    )
    ada = due("Ada", language="de", anniversary_date=date(2015, 6, 1))

    Scheduler(once=True).run()

    assert messages_of(ada) == {"hr": "Alles Gute zum Geburtstag, Ada!", "chat": "🎂 Happy birthday, Ada!"}
    # the type it does not name keeps the templates' text
    assert messages_of(ada, "ANNIVERSARY") == {
        "hr": "Hey, Ada Doe happy anniversary",
        "chat": "Hey, Ada Doe happy anniversary",
    }
    assert len({d.idempotency_key for d in Delivery.objects.filter(event__event_type="BIRTHDAY")}) == 1


def test_a_changed_language_applies_to_a_pending_occurrence_at_its_claim(hr):
    from users.services import user_update

    add_template("Alles Gute zum Geburtstag, {first_name}!", language="de")
    ada = due("Ada")
    user_update(user=ada, data={"language": "de"})
    make_due(list(ada.events.filter(status=EventStatus.PENDING)))

    Scheduler(once=True).run()

    assert messages_of(ada) == {"hr": "Alles Gute zum Geburtstag, Ada!"}


# --- the rules -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"language": "german", "body": "Hallo"}, "language"),
        ({"language": "de", "body": "Hallo {age} {years}"}, "body"),
        ({"milestone": 0, "body": "Hi"}, "milestone"),
    ],
)
def test_a_variant_is_validated_as_a_template_is(fields, field):
    with pytest.raises(ValidationError) as refused:
        message_template_save(template=MessageTemplate(event_type="BIRTHDAY", **fields), operator="ops")

    assert field in refused.value.message_dict
    assert MessageTemplate.objects.count() == len(EventType.values)


def test_a_second_text_for_the_same_type_language_and_milestone_is_refused():
    add_template("Alles Gute!", language="de")

    with pytest.raises(ValidationError):
        add_template("Noch mal!", language="de")


def test_the_choice_falls_back_through_the_language_and_milestone_in_order():
    add_template("pt", language="pt")
    add_template("pt-10", language="pt", milestone=10)
    add_template("default-10", milestone=10)
    templates = message_templates()

    def choose(language: str, years: int) -> str:
        return templates.chosen(event_type="BIRTHDAY", language=language, years=years)[0]

    assert choose("pt-BR", 10) == "pt-10"
    assert choose("pt-BR", 11) == "pt"
    assert choose("fr", 10) == "default-10"
    assert choose("fr", 11) == "Hey, {first_name} {last_name} it's your birthday"


@pytest.mark.parametrize(
    "overrides",
    [{"BIRTHDAY": "Happy {years}"}, {"WEDDING": "Hi"}, {"BIRTHDAY": "{"}, "Happy birthday", {"BIRTHDAY": 5}],
)
def test_a_destinations_own_text_that_would_not_render_is_a_400_naming_the_field(api_client, overrides):
    created = api_client.post(
        DESTINATIONS_URL,
        {"name": "chat", "url": "https://chat.example.org/hook", "message_overrides": overrides},
        format="json",
    )

    assert created.status_code == 400
    assert set(created.data) == {"message_overrides"}


def test_the_api_sets_and_clears_a_destinations_own_text(api_client, hr):
    url = f"{DESTINATIONS_URL}{hr.pk}/"

    set_ = api_client.patch(
        url, {"message_overrides": {"BIRTHDAY": "🎂 Happy birthday, {first_name}!"}}, format="json"
    )
    cleared = api_client.patch(url, {"message_overrides": {}}, format="json")

    assert set_.status_code == 200 and set_.data["message_overrides"] == {
        "BIRTHDAY": "🎂 Happy birthday, {first_name}!"
    }
    assert cleared.status_code == 200 and cleared.data["message_overrides"] == {}


def test_a_stored_own_text_gone_bad_falls_back_to_the_templates(hr):
    destination_update(
        destination=hr, operator="ops", changes={"message_overrides": {"BIRTHDAY": "Hi {first_name}"}}
    )
    # A write around the service (or a later release dropping the placeholder).
    type(hr).objects.filter(pk=hr.pk).update(message_overrides={"BIRTHDAY": "Hi {nickname}"})
    ada = due("Ada")

    Scheduler(once=True).run()

    assert messages_of(ada) == {"hr": "Hey, Ada Doe it's your birthday"}


def test_a_resend_renders_the_destinations_own_text_again(hr, delivery_settings):
    from delivery.actions.resend import event_resend
    from delivery.models import DeliveryStatus

    destination_update(
        destination=hr, operator="ops", changes={"message_overrides": {"BIRTHDAY": "Yo {first_name}"}}
    )
    ada = due("Ada")
    Scheduler(once=True).run()
    event = ada.events.get(status=EventStatus.PROCESSING)
    Delivery.objects.filter(event=event).update(status=DeliveryStatus.DEAD, payload={"message": "lost"})
    event.__class__.objects.filter(pk=event.pk).update(status=EventStatus.FAILED)

    event_resend(event=event, operator="ops")

    assert messages_of(ada) == {"hr": "Yo Ada"}
    assert (
        timedelta(0) <= timezone.now() - Delivery.objects.get(event=event).requeued_at < timedelta(minutes=1)
    )
