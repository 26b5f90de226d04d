"""The worker's DNS resolver: a receiver's name resolves only to addresses the policy allows.

aiohttp connects to the addresses its resolver returns, and to nothing else, so
this is where the address actually connected to is checked
(delivery.receivers.addresses), after DNS, each time a name is resolved anew: a
name that answered a public address when it was set and answers 127.0.0.1 now
(DNS rebinding) is refused now. Refused answers are dropped and the connection
goes to those left; when none is left, AddressRefused, which the transport
makes a permanent failure without a request. A literal address in a URL never
reaches a resolver: the transport judges it itself (url_refusal).
"""

from __future__ import annotations

import logging
import socket

from aiohttp.abc import AbstractResolver, ResolveResult

from delivery.receivers.addresses import ReceiverPolicy, Refusal, address_refusal, parse_address

logger = logging.getLogger(__name__)


class AddressRefused(Exception):
    """Every address a receiver's name resolved to is refused: no connection is made.

    Not an OSError on purpose: aiohttp would wrap that as a DNS error, which the
    transport counts as the receiver being unreachable, to be tried again.
    """


class ScreeningResolver(AbstractResolver):
    """Another resolver's answers, less the addresses the policy refuses."""

    def __init__(self, *, policy: ReceiverPolicy, inner: AbstractResolver) -> None:
        self._policy = policy
        self._inner = inner

    async def screen(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_UNSPEC
    ) -> tuple[list[ResolveResult], list[Refusal]]:
        """Resolve `host`: the answers the policy allows, and why each other one is refused."""
        allowed: list[ResolveResult] = []
        refused: list[Refusal] = []
        for answer in await self._inner.resolve(host, port, family=family):
            address = parse_address(answer["host"])
            refusal = address_refusal(address=address, policy=self._policy) if address is not None else None
            if refusal is None:
                allowed.append(answer)
            else:
                refused.append(refusal)
        return allowed, refused

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        allowed, refused = await self.screen(host, port, family)
        if refused and not allowed:
            raise AddressRefused(refused[0].describe(host=host))
        if refused:
            logger.warning(
                "Receiver name resolved to refused addresses too; connecting only to the others",
                extra={"host": host, "refused": [str(r.address) for r in refused]},
            )
        return allowed

    async def close(self) -> None:
        await self._inner.close()
