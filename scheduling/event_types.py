"""The event types, apart from the models: the handlers name them without importing the
models, so the models can ask the handlers (a message template's placeholders) in turn."""

from django.db import models


class EventType(models.TextChoices):
    BIRTHDAY = "BIRTHDAY", "Birthday"
    ANNIVERSARY = "ANNIVERSARY", "Wedding anniversary"
