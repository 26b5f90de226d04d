# The real local webhook receiver and the settings pointing at it, shared with the delivery tests.
from delivery.tests.pipeline import delivery_settings, sink  # noqa: F401
