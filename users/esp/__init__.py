"""Bounces and complaints an ESP reports after a mail was relayed, through its tracking webhook.

django-anymail verifies each ESP's posts and normalises its events; a signal receiver
(receivers.py, connected in users.apps) hands each to services.esp_tracking_event_record,
which marks the address undeliverable on a hard bounce or a complaint. urls.py mounts
the ESPs that ESP_WEBHOOKS enables (config/esp.py says what verifies each).
"""
