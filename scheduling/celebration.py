"""Whether, and where, a person is celebrated, and whether their age is said (docs/design.md, "The person's say").

Visibility, per person and event type, over a company default per event type
(scheduling.models.CelebrationDefault; a type without one is public):

- public: every destination that wants the occurrence (by type and audience);
- private: only the destinations that reach the person alone (Destination.personal),
  never a channel post nor a digest line;
- none: nothing, anywhere. The scheduler's claim fails the occurrence with
  NOT_CELEBRATED, as a pause does with its reason.

A change takes effect for everything not yet begun: the claim reads it in the
batch's transaction, the digests when they are built, and the change itself
withdraws the deliveries queued before it and not yet sent, and takes the person
out of the digests not yet sent (celebration_narrowed, whose receiver in delivery
does it in the change's transaction). A delivery already being sent is not touched.

A birthday without a year is stored as that day in YEARLESS_YEAR: every reader of
the date (the handlers' arithmetic, Feb 29's rule, the import's COPY, the console's
sorting) keeps reading one date column, and the database refuses any other year
before 1900 (users.models). Then, or when the person chose that their age is never
said (hide_age), no message states an age: a text using one falls back to one
without (age_said, scheduling.selectors.MessageTemplates.chosen).
"""

from __future__ import annotations

from datetime import date
from typing import Protocol

from django.db import models
from django.dispatch import Signal


class Visibility(models.TextChoices):
    # Every destination that wants the occurrence.
    PUBLIC = "public", "Public"
    # Only destinations that reach the person alone.
    PRIVATE = "private", "Private"
    # Nothing, anywhere.
    NONE = "none", "Not celebrated"


class ChangedBy(models.TextChoices):
    """Who made a change of a person's choices (users.models.CelebrationChange)."""

    OPERATOR = "operator", "An operator, in the console"
    API_CLIENT = "api_client", "An API client"
    PERSON = "person", "The person, through their page"
    IMPORT = "import", "An import"


# The failure reason of an occurrence whose person is not celebrated: the metrics count it by this text.
NOT_CELEBRATED = "recipient not celebrated"
# A birthday given as month and day only is stored in this year: a leap year (Feb 29 stays a
# date), far before EARLIEST_DATE (no real birth date), and one Python's date and PostgreSQL's take.
YEARLESS_YEAR = 4
# The event type's default while the company has chosen none.
DEFAULT_VISIBILITY = Visibility.PUBLIC

# Sent inside the transaction that narrowed who sees some occurrences (a person's visibility
# made private or none, or a company default), with `user_id` (None: everyone whose own
# choice does not override the default) and `event_types`. The receiver in delivery
# withdraws what is queued and not yet sent, and takes the people out of the unsent digests.
celebration_narrowed = Signal()

# Sent inside the transaction that stopped a person's age being said (hide_age set, or the
# year of their birthday removed), with `user_id`, after their row is saved. The receiver in
# delivery renders their queued, unsent messages again, without the age.
age_unsaid = Signal()


class AgedRecipient(Protocol):
    @property
    def date_of_birth(self) -> date: ...
    @property
    def hide_age(self) -> bool: ...


def year_known(day: date) -> bool:
    """Whether a stored date of birth has its year (not a month and day alone)."""
    return day.year != YEARLESS_YEAR


def age_said(recipient: AgedRecipient) -> bool:
    """Whether a message may state the recipient's age: the year is known and they did not hide it."""
    return not recipient.hide_age and year_known(recipient.date_of_birth)


def visibility_of(choice: str | None, *, default: str | None) -> str:
    """The visibility in force: the person's choice, else the company default, else public."""
    return choice or default or DEFAULT_VISIBILITY


def month_day(day: date) -> str:
    """A date without its year as ISO 8601 writes it (--06-15): how a yearless birthday is shown."""
    return f"--{day.month:02d}-{day.day:02d}"
