"""A state machine's table of moves, and the one refusal of every move it has not.

Each status that moves by rules has one: an event's (scheduling.services.transitions), a
delivery's and an endpoint's (delivery.states) and a recovery's (delivery.actions.recovery).
It lives beside InvalidStateTransition, which it raises: delivery, above scheduling, uses both.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TypeVar

from scheduling.exceptions import InvalidStateTransition

Holds = TypeVar("Holds")


class StateMachine(Mapping[tuple[str, str], Holds]):
    """The moves (source, target) a status may make, each with what it holds: the one actor who may make
    it, or why it is made. Read as a mapping; `refuse_unless` refuses every other move."""

    def __init__(self, moves: Mapping[tuple[str, str], Holds]) -> None:
        self._moves = dict(moves)

    def __getitem__(self, move: tuple[str, str]) -> Holds:
        return self._moves[move]

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self._moves)

    def __len__(self) -> int:
        return len(self._moves)

    def refuse_unless(self, *, source: str, target: str, mover: str, actor: Holds | None = None) -> None:
        """Raise InvalidStateTransition unless the table has the move and, with `actor`, gives it to that
        actor. `mover` names what was to move, as the refusal begins ("A delivery", "Recovery 7")."""
        held = self._moves.get((source, target))
        if held is not None and (actor is None or held == actor):
            return
        by = f" by the {actor}" if held is not None else ""
        raise InvalidStateTransition(f"{mover} cannot move from {source} to {target}{by}.")
