"""The kinds of destination move to channels/: `teams` becomes Teams Workflows, `teams_messagecard` the legacy card.

Destinations keep their format: a `teams` destination now gets the Adaptive Card a
Workflows webhook posts (kinds.teams). What is already queued for one was
rendered as a MessageCard, which a Workflows flow fails on after answering 202:
those bodies are rewritten here into the Adaptive Card with the same text (a
TextRun, shown as written). Deliveries that ended keep their body as sent; an
operator's resend renders a new one. The shape is written out below, not
imported, so that this migration stays what it is when kinds.teams changes.
"""

from django.db import migrations, models

QUEUED_MESSAGE_CARDS_TO_ADAPTIVE = """
UPDATE delivery_delivery AS d
SET payload = jsonb_build_object(
    'type', 'message',
    'attachments', jsonb_build_array(jsonb_build_object(
        'contentType', 'application/vnd.microsoft.card.adaptive',
        'contentUrl', NULL,
        'content', jsonb_build_object(
            'type', 'AdaptiveCard',
            '$schema', 'http://adaptivecards.io/schemas/adaptive-card.json',
            'version', '1.4',
            'body', jsonb_build_array(jsonb_build_object(
                'type', 'RichTextBlock',
                'inlines', jsonb_build_array(jsonb_build_object('type', 'TextRun', 'text', d.payload -> 'text'))
            ))
        )
    ))
)
FROM delivery_destination AS t
WHERE d.destination_id = t.id
  AND t.format = 'teams'
  AND d.status = 'QUEUED'
  AND d.payload ->> '@type' = 'MessageCard'
"""


class Migration(migrations.Migration):
    dependencies = [
        ("delivery", "0011_recoveries"),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="destination",
            name="destination_format_valid",
        ),
        migrations.AlterField(
            model_name="destination",
            name="format",
            field=models.CharField(
                choices=[
                    ("standard", "Standard Webhooks JSON"),
                    ("slack", "Slack"),
                    ("discord", "Discord"),
                    ("teams", "Microsoft Teams (Workflows)"),
                    ("teams_messagecard", "Microsoft Teams (legacy connector MessageCard)"),
                ],
                default="standard",
                max_length=32,
            ),
        ),
        migrations.AddConstraint(
            model_name="destination",
            constraint=models.CheckConstraint(
                condition=models.Q(("format__in", ["standard", "slack", "discord", "teams", "teams_messagecard"])),
                name="destination_format_valid",
            ),
        ),
        # Nothing to undo: a MessageCard is what a Workflows flow fails on.
        migrations.RunSQL(QUEUED_MESSAGE_CARDS_TO_ADAPTIVE, reverse_sql=migrations.RunSQL.noop),
    ]
