"""Message templates: what is valid, how a message renders, the stored rows and their guarantees."""

import logging
from datetime import date
from types import SimpleNamespace

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.db import DataError, IntegrityError, transaction

from scheduling.handlers import REGISTRY, get_handler
from scheduling.messages import render_message, template_errors
from scheduling.models import EventType, MessageTemplate
from scheduling.selectors import message_templates
from scheduling.services.messages import message_template_save, message_templates_create_missing

BIRTHDAY = get_handler(EventType.BIRTHDAY)
DEFAULTS = {event_type: handler.message_template for event_type, handler in REGISTRY.items()}
NAMES = "{age}, {first_name}, {last_name}"


def recipient(**fields):
    values = {
        "first_name": "Ada",
        "last_name": "Lovelace",
        "date_of_birth": date(1990, 12, 10),
        "anniversary_date": date(2015, 6, 20),
        "hide_age": False,
    }
    return SimpleNamespace(**{**values, **fields})


# --- validation -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "template, errors",
    [
        ("Hey, {first_name} {last_name} it's your birthday", []),
        ("Happy {age}th, {first_name}!", []),
        ("{first_name}, {first_name}!", []),
        ("No placeholder at all", []),
        ("{{first_name}} is written as is", []),
        ("", ["The message is blank."]),
        (" \t\n", ["The message is blank."]),
        ("Hi {nickname}", [f"Unknown placeholder {{nickname}}: use {NAMES}."]),
        ("Hi {years}", [f"Unknown placeholder {{years}}: use {NAMES}."]),
        ("Hi {First_Name}", [f"Unknown placeholder {{First_Name}}: use {NAMES}."]),
        ("Hi {0}", [f"{{0}} is not a placeholder: name one of {NAMES}."]),
        ("Hi {}", [f"{{}} is not a placeholder: name one of {NAMES}."]),
        ("Hi {user.first_name}", [f"{{user.first_name}} is not a placeholder: name one of {NAMES}."]),
        (
            "Hi {first_name.__class__}",
            [f"{{first_name.__class__}} is not a placeholder: name one of {NAMES}."],
        ),
        ("Hi {a[0]}", [f"{{a[0]}} is not a placeholder: name one of {NAMES}."]),
        ("Hi { first_name }", [f"{{ first_name }} is not a placeholder: name one of {NAMES}."]),
        (
            "Hi {first_name!r}",
            ["{first_name!r}: conversions and formats are not allowed; write {first_name}."],
        ),
        ("Age {age:d}", ["{age:d}: conversions and formats are not allowed; write {age}."]),
        ("Age {age:>{width}}", ["{age:>{width}}: conversions and formats are not allowed; write {age}."]),
        (
            "Hi {first_name",
            ["Unbalanced braces (expected '}' before end of string): write {{ or }} for a literal brace."],
        ),
        (
            "Hi first_name}",
            [
                "Unbalanced braces (Single '}' encountered in format string): write {{ or }} for a literal brace."
            ],
        ),
        (
            "Hi {",
            [
                "Unbalanced braces (Single '{' encountered in format string): write {{ or }} for a literal brace."
            ],
        ),
        (
            "Hi {first_name!}",
            ["Unbalanced braces (unmatched '{' in format spec): write {{ or }} for a literal brace."],
        ),
        (
            "{nick} and {nick} and {0}",
            [
                f"Unknown placeholder {{nick}}: use {NAMES}.",
                f"{{0}} is not a placeholder: name one of {NAMES}.",
            ],
        ),
    ],
)
def test_template_errors(template, errors):
    assert template_errors(template=template, placeholders=BIRTHDAY.placeholders) == errors


@pytest.mark.parametrize(
    "template, text",
    [
        ("Hey, {first_name} {last_name} it's your birthday", "Hey, {last_name} }{ it's your birthday"),
        ("{age}{age} {{}} {last_name}", "3636 {} }{"),
        ("plain text", "plain text"),
    ],
)
def test_a_valid_template_renders_braces_in_values_as_text(template, text):
    assert template_errors(template=template, placeholders=BIRTHDAY.placeholders) == []

    rendered = render_message(
        template=template,
        handler=BIRTHDAY,
        user=recipient(first_name="{last_name}", last_name="}{"),
        occurrence_date=date(2026, 12, 10),
    )

    assert rendered == text


def test_every_handlers_default_is_valid_and_uses_only_its_placeholders():
    for handler in REGISTRY.values():
        assert template_errors(template=handler.message_template, placeholders=handler.placeholders) == []
        assert (
            set(handler.message_values(user=recipient(), occurrence_date=date(2026, 12, 10)))
            == handler.placeholders
        )


# --- rendering --------------------------------------------------------------------------------


def test_the_default_birthday_message_is_unchanged():
    text = render_message(
        template=BIRTHDAY.message_template,
        handler=BIRTHDAY,
        user=recipient(),
        occurrence_date=date(2026, 12, 10),
    )

    assert text == "Hey, Ada Lovelace it's your birthday"


@pytest.mark.parametrize(
    "date_of_birth, occurrence_date, age",
    [
        (date(1990, 12, 10), date(2026, 12, 10), 36),
        (date(1999, 12, 31), date(2000, 12, 31), 1),
        (date(1900, 1, 1), date(2026, 1, 1), 126),
        # Feb 29 birthdays: celebrated on Feb 28 in common years, Feb 29 in leap years.
        (date(2000, 2, 29), date(2027, 2, 28), 27),
        (date(2000, 2, 29), date(2028, 2, 29), 28),
        (date(2000, 2, 29), date(2100, 2, 28), 100),
    ],
)
def test_age_is_the_age_reached_on_that_occurrence(date_of_birth, occurrence_date, age):
    text = render_message(
        template="{first_name} turns {age}",
        handler=BIRTHDAY,
        user=recipient(date_of_birth=date_of_birth),
        occurrence_date=occurrence_date,
    )

    assert text == f"Ada turns {age}"


# --- the stored rows --------------------------------------------------------------------------

db = pytest.mark.django_db


@db
def test_migrate_gives_every_registered_type_a_row_holding_its_default():
    rows = {row.event_type: row for row in MessageTemplate.objects.all()}

    assert rows.keys() == REGISTRY.keys()
    for event_type, row in rows.items():
        assert (row.body, row.updated_by) == (REGISTRY[event_type].message_template, "")


@pytest.mark.django_db(transaction=True)
def test_a_flush_leaves_the_rows_in_place_as_migrate_does():
    # Transactional test cases flush the database between tests; flush sends
    # post_migrate without a migration state.
    call_command("flush", interactive=False, verbosity=0)

    assert set(MessageTemplate.objects.values_list("event_type", flat=True)) == REGISTRY.keys()


@db
def test_creating_missing_rows_restores_a_deleted_one_and_keeps_an_operators_text():
    MessageTemplate.objects.filter(event_type=EventType.BIRTHDAY).update(
        body="Hi {first_name}", updated_by="ops"
    )
    kept = MessageTemplate.objects.get(event_type=EventType.BIRTHDAY)

    message_templates_create_missing()
    assert MessageTemplate.objects.get(event_type=EventType.BIRTHDAY).body == kept.body

    MessageTemplate.objects.all().delete()
    message_templates_create_missing()
    assert MessageTemplate.objects.get(event_type=EventType.BIRTHDAY).body == BIRTHDAY.message_template


@db
def test_saving_a_template_records_the_operator():
    template = MessageTemplate.objects.get(event_type=EventType.BIRTHDAY)
    template.body = "Happy {age}th, {first_name}!"

    message_template_save(template=template, operator="ops-alice")

    stored = MessageTemplate.objects.get(event_type=EventType.BIRTHDAY)
    assert (stored.body, stored.updated_by) == ("Happy {age}th, {first_name}!", "ops-alice")


@db
@pytest.mark.parametrize("body", ["Hi {nickname}", "Hi {0}", "Hi {first_name", "Age {age:d}", "   "])
def test_saving_a_bad_template_is_refused_with_the_error_and_stores_nothing(body):
    template = MessageTemplate.objects.get(event_type=EventType.BIRTHDAY)
    template.body = body

    with pytest.raises(ValidationError) as refused:
        message_template_save(template=template, operator="ops-alice")

    assert refused.value.message_dict["body"] == template_errors(
        template=body, placeholders=BIRTHDAY.placeholders
    )
    assert MessageTemplate.objects.get(event_type=EventType.BIRTHDAY).body == BIRTHDAY.message_template


@db
@pytest.mark.parametrize(
    "change, error",
    [
        ({"body": ""}, "message_template_body_not_blank"),
        ({"body": " \t\n"}, "message_template_body_not_blank"),
        ({"event_type": "CHRISTMAS"}, "message_template_event_type_valid"),
    ],
)
def test_the_database_refuses_a_blank_body_or_an_unknown_type(change, error):
    with pytest.raises(IntegrityError, match=error), transaction.atomic():
        MessageTemplate.objects.filter(event_type=EventType.BIRTHDAY).update(**change)


@db
def test_the_database_refuses_a_second_row_for_a_type_and_a_body_over_the_limit():
    with pytest.raises(IntegrityError), transaction.atomic():
        MessageTemplate.objects.create(event_type=EventType.BIRTHDAY, body="Hi {first_name}")
    with pytest.raises(DataError), transaction.atomic():
        MessageTemplate.objects.filter(event_type=EventType.BIRTHDAY).update(body="x" * 1001)


# --- what the scheduler renders with ----------------------------------------------------------


@db
def test_message_templates_reads_the_stored_texts_in_one_query(django_assert_num_queries):
    MessageTemplate.objects.filter(event_type=EventType.BIRTHDAY).update(body="Hi {first_name}")

    with django_assert_num_queries(1):
        templates = message_templates()

    assert templates == {**DEFAULTS, EventType.BIRTHDAY: "Hi {first_name}"}


@db
def test_a_type_without_a_row_gets_its_handlers_default():
    MessageTemplate.objects.all().delete()

    assert message_templates() == DEFAULTS


@db
def test_a_stored_template_that_no_longer_fits_its_handler_is_logged_and_the_default_used(caplog):
    # Written around the model's validation, as a raw UPDATE or a later release
    # that dropped a placeholder would leave it.
    MessageTemplate.objects.filter(event_type=EventType.BIRTHDAY).update(body="Hi {nickname}")

    with caplog.at_level(logging.ERROR, logger="scheduling.selectors"):
        templates = message_templates()

    assert templates == DEFAULTS
    assert [record.event_type for record in caplog.records] == [EventType.BIRTHDAY]
