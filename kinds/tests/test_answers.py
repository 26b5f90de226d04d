"""Each kind's reading of its service's answers: delivered, retry (after the wait asked for), refused, gone."""

import pytest

from kinds import kind_for
from kinds.base import Reading, Verdict

slack, discord, teams, standard = (kind_for(name) for name in ("slack", "discord", "teams", "standard"))


def read(channel, status, body="", headers=None) -> Reading:
    return channel.read(status=status, headers=headers or {}, body=body)


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (404, "channel_not_found"),
        (410, "channel_is_archived"),
        (403, "action_prohibited"),
        (404, "no_service"),
        (404, "no_team"),
        (403, "invalid_token"),
        (404, "no_active_hooks"),
        (403, "posting_to_general_channel_denied"),
        (404, "no_service\n"),
    ],
)
def test_slacks_answers_that_the_webhook_or_its_channel_is_gone_read_as_gone_with_its_code(status, body):
    assert read(slack, status, body) == Reading(Verdict.GONE, code=body.strip())


def test_slacks_other_answers_read_as_any_receivers():
    assert read(slack, 200, "ok").verdict == Verdict.DELIVERED
    assert read(slack, 400, "invalid_payload") == Reading(Verdict.REFUSED, code="invalid_payload")
    assert read(slack, 500, "rollup_error").verdict == Verdict.RETRY
    assert read(slack, 429, "rate_limited", {"Retry-After": "3"}) == Reading(Verdict.RETRY, retry_after=3.0)
    # A 404 that is not one of Slack's codes (a proxy's page): what any 404 is.
    assert read(slack, 404, "<html>Not Found</html>") == Reading(Verdict.REFUSED)
    # A code in a 5xx body is no verdict of Slack's on the webhook.
    assert read(slack, 503, "no_service").verdict == Verdict.RETRY


@pytest.mark.parametrize(
    ("body", "headers", "wait"),
    [
        ('{"message": "You are being rate limited.", "retry_after": 0.25, "global": false}', {}, 0.25),
        ('{"retry_after": 2}', {"Retry-After": "9"}, 2.0),
        # Defensively: what is not a finite, non-negative number falls back to the header, else None.
        ('{"retry_after": "soon"}', {"Retry-After": "4"}, 4.0),
        ('{"retry_after": -1}', {"Retry-After": "4"}, 4.0),
        ('{"retry_after": true}', {}, None),
        ('{"retry_after": 1e999}', {}, None),
        ("[1, 2]", {"Retry-After": "1"}, 1.0),
        ('{"retry_after": 0.5, "mess', {"Retry-After": "1"}, 1.0),
        ("", {}, None),
    ],
)
def test_discords_429_waits_what_its_json_body_says_else_its_retry_after(body, headers, wait):
    assert read(discord, 429, body, headers) == Reading(Verdict.RETRY, retry_after=wait)


def test_discords_deleted_webhook_and_changed_token_read_as_gone():
    assert read(discord, 404, '{"message": "Unknown Webhook", "code": 10015}') == Reading(
        Verdict.GONE, code="unknown_webhook"
    )
    assert read(discord, 401, '{"message": "Invalid Webhook Token", "code": 50027}') == Reading(
        Verdict.GONE, code="invalid_webhook_token"
    )
    # Another 404 (a channel's message, a proxy) is what any 404 is.
    assert read(discord, 404, '{"message": "Unknown Channel", "code": 10003}') == Reading(Verdict.REFUSED)
    assert read(discord, 404, "not json") == Reading(Verdict.REFUSED)
    assert read(discord, 204).verdict == Verdict.DELIVERED
    assert read(discord, 400, '{"code": 50035}').verdict == Verdict.REFUSED


def test_a_workflows_202_is_delivered_and_a_deleted_flow_is_gone():
    assert read(teams, 202).verdict == Verdict.DELIVERED
    assert read(teams, 404, '{"error": {"code": "WorkflowNotFound", "message": "x"}}') == Reading(
        Verdict.GONE, code="WorkflowNotFound"
    )
    assert read(teams, 404, '{"error": "x"}') == Reading(Verdict.REFUSED)
    assert read(teams, 429, "", {"Retry-After": "2"}) == Reading(Verdict.RETRY, retry_after=2.0)


@pytest.mark.parametrize(
    ("status", "verdict"),
    [(200, Verdict.DELIVERED), (204, Verdict.DELIVERED), (404, Verdict.REFUSED), (410, Verdict.REFUSED)],
)
def test_a_standard_receiver_is_never_read_as_gone_by_its_body(status, verdict):
    # A machine receiver's 404 may be a deploy in progress: it counts against its health instead.
    assert read(standard, status, "channel_not_found").verdict == verdict


def test_each_chat_kind_has_its_services_pace_and_the_standard_none():
    assert (slack.pace, discord.pace, teams.pace, standard.pace) == (1.0, 2.5, 4.0, None)
