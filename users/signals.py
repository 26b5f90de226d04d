"""What the apps above users (delivery) hook into when a recipient is erased or exported.

users cannot import them (the apps import one way, .importlinter): they connect
receivers in their AppConfig.ready(), and each receiver calls a service of theirs.
"""

from django.dispatch import Signal

# Sent inside the erase's transaction, after the recipient's row and every event
# of theirs is locked and before any is deleted, with `user_id` and `event_ids`.
# Each receiver deletes or strips its own rows about those events, waiting for
# their row locks as it goes; the rows it leaves must name no one.
recipient_erasing = Signal()

# Sent by the export with `user_id` and `event_ids`; each receiver returns a dict
# of sections (JSON-ready values) that the export adds to its own.
recipient_exporting = Signal()
