"""Writes to the delivery outbox, one module per concern.

- transitions: the Delivery state machine and the one lease-checked UPDATE
  that makes every move.
- enqueue: the scheduler's claim, turning due events into queued deliveries.
- leases: the worker's side of a lease (claim, renew, hand back, take over).
- record: writing attempts down and applying their outcomes.
- operator: an operator's resend.
"""
