"""Audiences and languages for real: a scheduler and two worker processes, three team channels and one for everyone.

Counted at each receiver: it gets exactly its people, each once, and nobody else; read at the
receivers: a German speaker greeted in German, a speaker of a language without a template in
the default, a chat channel in its own words.
"""

from collections import Counter

import pytest

from delivery.destinations.fields import DestinationSettings
from delivery.destinations.services import destination_create, destination_update
from delivery.models import Destination
from delivery.tests.pipeline import (
    ScriptedSink,
    assert_each_receiver_accepted_each_key_once,
    create_due_users,
    process_env,
    settled,
    start_process,
    stop_all,
    wait_until,
)
from scheduling.models import Event, EventStatus, MessageTemplate
from scheduling.services.messages import message_template_save
from users.models import User

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

RECIPIENTS = 300
# By recipient number: one team each, some in two, some in none (greeted only by the everyone channel).
TEAMS = (["team:platform"], ["team:data"], ["team:design"], ["team:data", "team:platform"], [])


def test_three_team_channels_and_one_for_everyone_each_get_exactly_their_people_once(
    delivery_settings, tmp_path
):
    # given three team receivers and one for everyone, and 300 due recipients of various teams
    delivery_settings.WEBHOOK_URL = ""
    with (
        ScriptedSink() as platform,
        ScriptedSink() as data,
        ScriptedSink() as design,
        ScriptedSink() as everyone,
    ):
        sinks = {"team:platform": platform, "team:data": data, "team:design": design}
        for label, sink in sinks.items():
            destination_create(
                settings=DestinationSettings(
                    name=label.removeprefix("team:"),
                    url=sink.url,
                    format="slack",
                    audience_labels=[label],
                    # A local receiver: not Slack's pace of one a second (kinds/slack.py), which
                    # would take two minutes for the platform team's 120.
                    max_rate=50,
                ),
                operator="ops",
            )
        destination_create(settings=DestinationSettings(name="everyone", url=everyone.url), operator="ops")
        # The platform channel in its own words; German has a template, French none.
        destination_update(
            destination=Destination.objects.get(name="platform"),
            operator="ops",
            changes={"message_overrides": {"BIRTHDAY": "🎂 Happy birthday, {first_name}!"}},
        )
        message_template_save(
            template=MessageTemplate(event_type="BIRTHDAY", language="de", body="Alles Gute, {first_name}!"),
            operator="ops",
        )
        create_due_users(RECIPIENTS)
        for number, user in enumerate(User.objects.order_by("first_name")):
            User.objects.filter(pk=user.pk).update(
                labels=TEAMS[number % len(TEAMS)], language=("de", "fr", "")[number % 3]
            )
        recipients = {
            str(pk): (name, language)
            for pk, name, language in User.objects.values_list("pk", "first_name", "language")
        }
        labels_by_key = {
            key: labels
            for key, labels in Event.objects.filter(status=EventStatus.PENDING).values_list(
                "idempotency_key", "user__labels"
            )
        }
        expected = {label: {k for k, held in labels_by_key.items() if label in held} for label in sinks}
        env = process_env(delivery_settings)
        processes = [start_process(["run_scheduler", "--batch-size", "50"], env, tmp_path / "scheduler.log")]
        processes += [
            start_process(["run_worker", "--batch-size", "50"], env, tmp_path / f"worker{i}.log")
            for i in range(2)
        ]
        try:
            # when the fleet sends everything
            assert everyone.wait_for(RECIPIENTS, timeout=120), f"everyone got {len(set(everyone.keys()))}"
            for label, sink in sinks.items():
                assert sink.wait_for(len(expected[label]), timeout=60), f"{label} got {len(set(sink.keys()))}"
            wait_until(settled, 60, "every outcome to be recorded")
        finally:
            exit_codes = stop_all(processes)

        # then each team receiver took exactly its people's keys, once each, and the everyone one all of them
        assert exit_codes == [0, 0, 0]
        for label, sink in sinks.items():
            assert set(sink.keys()) == expected[label], label
            assert_each_receiver_accepted_each_key_once([sink], expected[label], label)
        assert_each_receiver_accepted_each_key_once([everyone], set(labels_by_key))
        # 60 recipients per group: the two-team group counted in both teams, the no-team group in none
        assert {label: len(keys) for label, keys in expected.items()} == {
            "team:platform": 120,
            "team:data": 120,
            "team:design": 60,
        }
        assert max(Counter(k for sink in sinks.values() for k in sink.keys()).values()) == 2
        assert not Event.objects.filter(status__in=[EventStatus.PROCESSING, EventStatus.FAILED]).exists()
        # and the words: German for de, the default for fr (no template) and for none; the platform channel its own
        words = []
        for received in everyone.received:
            first_name, language = recipients[received.body["user_id"]]
            assert received.body["message"] == (
                f"Alles Gute, {first_name}!"
                if language == "de"
                else f"Hey, {first_name} Load it's your birthday"
            )
            words.append(language)
        assert Counter(words) == {"de": 100, "fr": 100, "": 100}
        assert {r.body["text"].split(",")[0] for r in platform.received} == {"🎂 Happy birthday"}
