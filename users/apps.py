from django.apps import AppConfig


class UsersConfig(AppConfig):
    name = "users"
    # Django's own auth users are the operators; ours are the people who receive
    # messages. The admin must never show two different things called "Users".
    verbose_name = "Recipients"
