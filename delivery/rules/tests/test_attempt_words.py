"""An attempt in words by what it led to, a delivery's attempts as "n of max", and each failure cause's hint."""

import pytest

from delivery.models import AttemptOutcome, DeliveryStatus
from delivery.rules.attempt_words import AttemptCount, attempt_label
from delivery.rules.failure_causes import cause_hint, http_cause

D, T, P, A = (
    AttemptOutcome.DELIVERED,
    AttemptOutcome.TRANSIENT_FAILURE,
    AttemptOutcome.PERMANENT_FAILURE,
    AttemptOutcome.ABANDONED,
)
QUEUED, DEAD, DELIVERED = DeliveryStatus.QUEUED, DeliveryStatus.DEAD, DeliveryStatus.DELIVERED


@pytest.mark.parametrize(
    ("outcome", "status", "counted", "after", "label"),
    [
        (D, 200, True, DELIVERED, "Delivered"),
        (T, 503, True, QUEUED, "Failed: tried again"),
        (T, 503, True, DEAD, "Failed: given up"),
        (P, 400, True, DEAD, "Refused: not tried again"),
        (P, 400, True, QUEUED, "Refused: tried again"),
        (T, 429, False, QUEUED, "Throttled (429): not counted; tried again at the receiver's pace"),
        # A chat webhook's 404 (gone): held for an operator, not "Permanent failure" while it is still to be sent.
        (
            P,
            404,
            False,
            QUEUED,
            "Refused: not counted; held until the receiver is back or an operator fixes it",
        ),
        (T, 503, False, DEAD, "Failed: not counted; given up (waited past EVENT_MAX_LATENESS)"),
        (A, None, True, QUEUED, "Abandoned by a lost worker: tried again"),
        # Recorded before what followed was kept: the answer as it was read.
        (P, 404, None, "", "Permanent failure"),
    ],
)
def test_an_attempt_is_labelled_by_what_it_led_to(outcome, status, counted, after, label):
    assert attempt_label(outcome=outcome, status_code=status, counted=counted, status_after=after) == label


@pytest.mark.parametrize(
    ("made", "not_counted", "max_attempts", "words"),
    [
        (3, 0, 8, "3 of 8"),
        # Seven attempts at a gone webhook, six of them not counted: max_attempts grew to 14, the budget did not.
        (7, 6, 14, "1 of 8, and 6 not counted (throttled, or the receiver gone or down)"),
        (9, 0, 16, "9 of 16"),
    ],
)
def test_a_deliverys_attempts_read_counted_of_the_budget_and_a_word_for_the_others(
    made, not_counted, max_attempts, words
):
    assert AttemptCount(made=made, not_counted=not_counted, max_attempts=max_attempts).words() == words


@pytest.mark.parametrize(
    ("cause", "chat", "says"),
    [
        (http_cause(301), False, "Redirects are never followed"),
        (http_cause(308), True, "give the destination the new URL"),
        (http_cause(404), True, "the webhook no longer exists: it was deleted"),
        (http_cause(404), False, "Check its path"),
        (http_cause(401), False, "signing secret"),
        (http_cause(429), False, "a 429 costs no attempt"),
        (http_cause(503), True, "It is retried with backoff"),
        (http_cause(400), False, "its answer, on the attempt, says why"),
        ("timeout", False, "Raise the timeout"),
        ("connection", False, "Check the host name"),
        ("address_refused", False, "WEBHOOK_ALLOWED_NETWORKS"),
        ("too_late", False, "EVENT_MAX_LATENESS"),
        ("other", False, "See the delivery's attempts"),
    ],
)
def test_each_cause_says_what_it_means_and_what_fixes_it(cause, chat, says):
    assert says in cause_hint(cause, chat=chat)
