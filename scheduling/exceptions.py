class SchedulingError(Exception):
    """Base class for errors the scheduling services raise on purpose."""


class InvalidStateTransition(SchedulingError):
    """The event is not in a state the requested transition may start from."""


class OptimisticLockError(SchedulingError):
    """Someone else changed the event between our read and our conditional update."""
