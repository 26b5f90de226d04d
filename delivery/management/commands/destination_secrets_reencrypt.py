from django.core.management.base import BaseCommand

from delivery.destinations.services import destination_secrets_reencrypt


class Command(BaseCommand):
    help = (
        "Encrypt every destination's signing secrets and receiver URL again under the first key of "
        "WEBHOOK_SECRET_KEYS, after a new key was put first: then the old keys can be removed from the "
        "setting. Also keys every receiver again under DJANGO_SECRET_KEY (run it after changing that too)."
    )

    def handle(self, *args, **options):
        count = destination_secrets_reencrypt()
        self.stdout.write(
            f"Encrypted {count} signing secrets and receiver URLs under the first key of WEBHOOK_SECRET_KEYS."
        )
