"""Whom a destination greets: its audience, one rule read by the claim's fan-out and by queries of recipients.

A destination greets everyone (no audience labels, the default), or the
recipients holding any of its audience labels; either way, never one holding
any of its excluded labels. An audience is data on the destination row, read
with the destinations once per claim batch (delivery.destinations.selectors.destinations_for_claim),
so a change applies to every occurrence claimed after it is saved, on every
scheduler, with no cache to invalidate; an occurrence already claimed keeps
the deliveries it was given.

`Audience.includes` decides for one recipient's labels (the claim),
`Audience.recipient_filter` says the same as a query of recipients (the
console's count of whom a destination greets, and whatever else must list its
people, such as a digest), so the two cannot disagree. `DestinationRouter` is
the claim's: which destinations an occurrence goes to, given its type and its
recipient's labels, computed once per distinct (type, labels) of a batch
rather than once per occurrence: a batch of 500 has a few dozen.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from django.db.models import Q

from delivery.models import Destination


@dataclass(frozen=True)
class Audience:
    # Empty: everyone.
    any_of: frozenset[str] = frozenset()
    none_of: frozenset[str] = frozenset()

    @classmethod
    def of(cls, destination: Destination) -> Audience:
        return cls(frozenset(destination.audience_labels), frozenset(destination.excluded_labels))

    @property
    def everyone(self) -> bool:
        return not self.any_of and not self.none_of

    def includes(self, labels: Iterable[str]) -> bool:
        """Whether a recipient holding `labels` (stored lowercase, as the audience's are) is greeted."""
        held = set(labels)
        return (not self.any_of or not self.any_of.isdisjoint(held)) and self.none_of.isdisjoint(held)

    def recipient_filter(self, *, prefix: str = "") -> Q:
        """The recipients it greets, as a filter of users (`prefix`: the path to the user, such as "user__").

        `labels && array` and `NOT labels && array` (overlap), served by the GIN index on labels.
        """
        wanted = Q(**{f"{prefix}labels__overlap": sorted(self.any_of)}) if self.any_of else Q()
        if self.none_of:
            wanted &= ~Q(**{f"{prefix}labels__overlap": sorted(self.none_of)})
        return wanted

    def describe(self) -> str:
        """As the console shows it: "everyone", "team:platform or team:data, not contractor"."""
        said = " or ".join(sorted(self.any_of)) if self.any_of else "everyone"
        return said + (f", not {' or '.join(sorted(self.none_of))}" if self.none_of else "")


class DestinationRouter:
    """The destinations an occurrence goes to: subscribed to its type, with its recipient in their audience.

    Built once per claim batch from the enabled destinations, with an index
    from each audience label to the destinations naming it; answers from a
    memo keyed by (event type, labels), so the recipients of a batch cost one
    dictionary lookup each once their label set has been seen, and a new label
    set costs its own labels' entries, not a pass over every destination (50
    team channels then cost the claim what one does: bench/workloads/audiences.py).
    """

    def __init__(self, destinations: Sequence[Destination]) -> None:
        # A digest destination gets its greetings in its daily digest (delivery.dispatch.digests),
        # never one delivery per occurrence: for the claim it is as if unsubscribed.
        self.destinations = [destination for destination in destinations if not destination.takes_digest]
        self.digests = [destination for destination in destinations if destination.takes_digest]
        self._audiences = [Audience.of(destination) for destination in self.destinations]
        # The destinations greeting everyone (less their exclusions), and those naming each label, by position.
        self._open = [i for i, audience in enumerate(self._audiences) if not audience.any_of]
        self._by_label: dict[str, list[int]] = {}
        for i, audience in enumerate(self._audiences):
            for label in audience.any_of:
                self._by_label.setdefault(label, []).append(i)
        self._memo: dict[tuple[str, tuple[str, ...], bool], tuple[Destination, ...]] = {}

    def digests_naming(self, *, event_type: str, labels: Sequence[str]) -> list[Destination]:
        """The digest destinations whose daily digest names such an occurrence (for the claim's reason)."""
        return [
            destination
            for destination in self.digests
            if destination.subscribes_to(event_type) and Audience.of(destination).includes(labels)
        ]

    def subscribed(self, event_type: str) -> bool:
        """Whether any destination subscribes to the type, whoever its recipient."""
        return any(destination.subscribes_to(event_type) for destination in self.destinations)

    def targets(
        self,
        *,
        event_type: str,
        labels: Sequence[str],
        private: bool = False,
        opted_out: Collection[int] | None = None,
    ) -> tuple[Destination, ...]:
        """The destinations an occurrence of `event_type` for a recipient holding `labels` goes to, in id order.

        `private`: the person is celebrated privately (scheduling.celebration): only personal destinations.
        `opted_out`: the ids of the destinations the person opted out of (delivery.models.DestinationOptOut).
        """
        found = self._targets(event_type=event_type, labels=labels, private=private)
        if opted_out:
            return tuple(destination for destination in found if destination.pk not in opted_out)
        return found

    def _targets(self, *, event_type: str, labels: Sequence[str], private: bool) -> tuple[Destination, ...]:
        # Labels are stored sorted (scheduling.labels.clean_labels): one key per set.
        key = (event_type, tuple(labels), private)
        found = self._memo.get(key)
        if found is None:
            candidates = set(self._open)
            for label in labels:
                candidates.update(self._by_label.get(label, ()))
            found = self._memo[key] = tuple(
                self.destinations[i]
                for i in sorted(candidates)
                if self.destinations[i].subscribes_to(event_type)
                and self._audiences[i].includes(labels)
                and (self.destinations[i].personal or not private)
            )
        return found
