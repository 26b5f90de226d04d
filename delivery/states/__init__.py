"""The state machines and their one conditional transition each: a delivery, an event's conclusion,
an endpoint (healthy, failing, paused) with the fleet's shared limits."""
