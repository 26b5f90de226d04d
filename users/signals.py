"""What the apps above users (delivery) hook into when a recipient is erased or exported.

users cannot import them (the apps import one way, .importlinter): they connect
receivers in their AppConfig.ready(), and each receiver calls a service of theirs.
"""

from django.dispatch import Signal

# Sent inside the erase's transaction with `user_id`, twice: before the
# recipient's events are locked, so that rows referring to an event are locked
# before it (the order a worker recording an outcome takes: its delivery, then
# the event), and again once the events are locked, for the rows a scheduler's
# claim that held one committed meanwhile. Each receiver deletes or strips its
# own rows about the recipient's events, waiting for their row locks as it goes;
# what it leaves must name no one, and a second call finds only what is new.
# Each receiver returns the ids of the events whose message may have reached a
# receiver (a request for it was started): an occurrence still in progress is
# remembered as handled only then (scheduling.services.deleted_recipients).
recipient_erasing = Signal()

# Sent by the export with `user_id` and `event_ids`; each receiver returns a dict
# of sections (JSON-ready values) that the export adds to its own.
recipient_exporting = Signal()
