# Wedding anniversaries: a second event type, in both tables that name event types.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('scheduling', '0008_message_templates'),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name='event',
            name='event_type_valid',
        ),
        migrations.RemoveConstraint(
            model_name='messagetemplate',
            name='message_template_event_type_valid',
        ),
        migrations.AlterField(
            model_name='event',
            name='event_type',
            field=models.CharField(choices=[('BIRTHDAY', 'Birthday'), ('ANNIVERSARY', 'Wedding anniversary')], max_length=32),
        ),
        migrations.AlterField(
            model_name='messagetemplate',
            name='event_type',
            field=models.CharField(choices=[('BIRTHDAY', 'Birthday'), ('ANNIVERSARY', 'Wedding anniversary')], max_length=32, unique=True),
        ),
        migrations.AddConstraint(
            model_name='event',
            constraint=models.CheckConstraint(condition=models.Q(('event_type__in', ['BIRTHDAY', 'ANNIVERSARY'])), name='event_type_valid'),
        ),
        migrations.AddConstraint(
            model_name='messagetemplate',
            constraint=models.CheckConstraint(condition=models.Q(('event_type__in', ['BIRTHDAY', 'ANNIVERSARY'])), name='message_template_event_type_valid'),
        ),
    ]
