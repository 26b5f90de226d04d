"""An attempt and a delivery's attempts in words: what happened to each attempt, and how many counted.

An attempt is labelled by what it led to (the retry decision, kept on its row:
`counted` and `delivery_status_after`), not by the outcome its answer was read as
nor by its delivery's final state: a 404 from a chat webhook that holds the
delivery for an operator is "Refused; held, not counted", not "Permanent
failure" while it is still to be sent. Pure: values in, words out.
"""

from __future__ import annotations

from dataclasses import dataclass

from delivery.models import AttemptOutcome, DeliveryStatus

# The word for an attempt that cost no attempt of the budget (a 429, a gone webhook, a receiver down).
NOT_COUNTED = "not counted"


def attempt_label(*, outcome: str, status_code: int | None, counted: bool | None, status_after: str) -> str:
    """What happened to one attempt: its answer in a word, then what followed it."""
    if outcome == AttemptOutcome.DELIVERED:
        return "Delivered"
    if not status_after:
        # Recorded before what followed was kept: its answer as it was read.
        return AttemptOutcome(outcome).label
    if counted is False:
        if status_code == 429:
            return f"Throttled (429): {NOT_COUNTED}; tried again at the receiver's pace"
        if status_after == DeliveryStatus.DEAD:
            return f"Failed: {NOT_COUNTED}; given up (waited past EVENT_MAX_LATENESS)"
        return f"{_answer(outcome)}: {NOT_COUNTED}; held until the receiver is back or an operator fixes it"
    if status_after == DeliveryStatus.QUEUED:
        then = "tried again"
    elif status_after == DeliveryStatus.DEAD:
        then = "not tried again" if outcome == AttemptOutcome.PERMANENT_FAILURE else "given up"
    else:
        then = status_after.lower()
    return f"{_answer(outcome)}: {then}"


# An unsuccessful attempt's answer in a word.
_ANSWERS: dict[str, str] = {
    AttemptOutcome.TRANSIENT_FAILURE: "Failed",
    AttemptOutcome.PERMANENT_FAILURE: "Refused",
    AttemptOutcome.ABANDONED: "Abandoned by a lost worker",
}


def _answer(outcome: str) -> str:
    return _ANSWERS.get(outcome, outcome)


@dataclass(frozen=True)
class AttemptCount:
    """A delivery's attempts as an operator reads them: "3 of 8, and 2 not counted"."""

    # Attempts made and those that cost none of the budget (counted False).
    made: int
    not_counted: int
    # The delivery's max_attempts: each attempt not counted raised it by one.
    max_attempts: int

    @property
    def counted(self) -> int:
        return self.made - self.not_counted

    @property
    def budget(self) -> int:
        """The attempts the counted ones are measured against: max_attempts less the raises of the uncounted."""
        return self.max_attempts - self.not_counted

    def words(self) -> str:
        said = f"{self.counted} of {self.budget}"
        if self.not_counted:
            said += f", and {self.not_counted} {NOT_COUNTED} (throttled, or the receiver gone or down)"
        return said
