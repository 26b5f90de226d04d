from django.apps import AppConfig


class PeopleConfig(AppConfig):
    """The pages a person reaches without an account: by a signed link from a mail or an operator."""

    name = "people"
    default_auto_field = "django.db.models.BigAutoField"
