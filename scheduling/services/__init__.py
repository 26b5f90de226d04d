"""Writes to events and message templates, one module per concern.

- transitions: the state machine (which moves exist, who may make them) and
  the one conditional UPDATE that makes every move.
- occurrences: the next occurrence of an event for a recipient, and its key.
- sync: keeping a recipient's PENDING events in step with their data
  (create, reschedule, replace, repair), and the operator's "deliver now".
- messages: an operator's message template, and each event type's row.

The bulk import of recipients with their first events is users.services
(users build on scheduling; scheduling does not import users).
"""
