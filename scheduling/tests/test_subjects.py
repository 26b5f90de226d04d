"""An email's subject: the template's own per language and milestone, else the type's default in English or German."""

from __future__ import annotations

from datetime import date

import pytest

from scheduling.handlers import RecipientRow
from scheduling.models import MessageTemplate
from scheduling.selectors import message_templates, subject_for

pytestmark = pytest.mark.django_db

ADA = RecipientRow(
    id=None,  # type: ignore[arg-type]
    first_name="Ada",
    last_name="Lovelace",
    date_of_birth=date(1990, 12, 10),
    timezone="UTC",
    anniversary_date=None,
    send_time=None,
    hide_age=False,
)


def subject(language: str, *, on: date = date(2026, 12, 10)) -> str:
    return subject_for(
        templates=message_templates(), event_type="BIRTHDAY", user=ADA, occurrence_date=on, language=language
    )


def test_the_types_defaults_in_english_and_german_by_the_recipients_language():
    assert subject("") == "Happy birthday, Ada!"
    assert subject("en-GB") == "Happy birthday, Ada!"
    assert subject("de") == "Alles Gute zum Geburtstag, Ada!"
    assert subject("de-AT") == "Alles Gute zum Geburtstag, Ada!"
    assert subject("pt-BR") == "Happy birthday, Ada!"


def test_a_templates_own_subject_wins_its_language_and_milestone_first():
    MessageTemplate.objects.filter(event_type="BIRTHDAY", language="", milestone=None).update(
        subject="Many happy returns, {first_name}"
    )
    MessageTemplate.objects.create(
        event_type="BIRTHDAY", language="de", milestone=None, body="Hallo", subject="Hallo {first_name}"
    )
    MessageTemplate.objects.create(
        event_type="BIRTHDAY", language="", milestone=40, body="Forty", subject="Forty, {first_name}!"
    )
    assert subject("fr") == "Many happy returns, Ada"
    assert subject("de") == "Hallo Ada"
    assert subject("fr", on=date(2030, 12, 10)) == "Forty, Ada!"
    # a language's own subject wins over a milestone in another, as texts do
    assert subject("de", on=date(2030, 12, 10)) == "Hallo Ada"
