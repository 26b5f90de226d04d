"""Create a local operator account and API token for `make run`, once."""

import os
import secrets
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from rest_framework.authtoken.models import Token

CREDENTIALS_FILE = Path(settings.BASE_DIR) / "var" / "local-credentials.txt"


class Command(BaseCommand):
    help = "Create the local admin account and API token if none exist, and print them."

    def add_arguments(self, parser):
        parser.add_argument("--username", default="admin")

    def handle(self, *args, username, **options):
        Operator = get_user_model()
        operator = Operator.objects.filter(username=username).first()
        if operator is None:
            password = secrets.token_urlsafe(12)
            operator = Operator.objects.create_superuser(username=username, email="", password=password)
            token, _ = Token.objects.get_or_create(user=operator)
            CREDENTIALS_FILE.parent.mkdir(parents=True, exist_ok=True)
            CREDENTIALS_FILE.write_text(
                f"admin user: {username}\nadmin password: {password}\nAPI token: {token.key}\n"
            )
            CREDENTIALS_FILE.chmod(0o600)
        else:
            Token.objects.get_or_create(user=operator)
        token_key = Token.objects.get(user=operator).key
        if CREDENTIALS_FILE.exists():
            self.stdout.write(CREDENTIALS_FILE.read_text().rstrip())
        else:
            self.stdout.write(
                f"admin user: {username} (password set earlier; "
                f"`manage.py changepassword {username}` to reset)\nAPI token: {token_key}"
            )
        self.stdout.write(
            "Log in to the admin with the user and password above; call the API with\n"
            f'  curl -H "Authorization: Token {token_key}" '
            f"http://{os.environ.get('RUN_HOST', '127.0.0.1')}:{os.environ.get('RUN_PORT', '8000')}/api/v1/users/"
        )
