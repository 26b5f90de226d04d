from django.apps import AppConfig


class UsersConfig(AppConfig):
    name = "users"
    # Django's own auth users are the operators; ours are the people who receive
    # messages. The admin must never show two different things called "Users".
    verbose_name = "Recipients"

    def ready(self) -> None:
        from anymail.signals import tracking

        from users.esp.receivers import esp_tracking_received

        # An ESP's bounces and complaints (users/esp/).
        tracking.connect(esp_tracking_received, dispatch_uid="users.esp.tracking")
