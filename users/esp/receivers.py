"""anymail's tracking signal, wired to the service (connected in users.apps.UsersConfig.ready)."""

from anymail.signals import AnymailTrackingEvent

from users.esp.services import esp_tracking_event_record


def esp_tracking_received(
    sender: object, event: AnymailTrackingEvent, esp_name: str, **kwargs: object
) -> None:
    # An exception answers the ESP 500, and it posts the event again later.
    esp_tracking_event_record(esp_name=esp_name, event=event)
