"""API rate limits: DRF's throttles, keyed by the client address the trusted proxies report."""

import time

from rest_framework.throttling import AnonRateThrottle, SimpleRateThrottle, UserRateThrottle

from config.client_address import client_address


class ClientAddressMixin:
    def get_ident(self, request) -> str:
        return client_address(request)

    def timer(self) -> float:
        # DRF captures `timer = time.time` as a class attribute when its module is
        # first imported (lazily, on the first API request). If a clock fake such
        # as the suite's freezegun is active at that moment, the attribute holds
        # the fake, a Python function, which then binds as a method and fails
        # with a TypeError on every request from then on. Looking time.time up
        # at each call cannot capture anything.
        return time.time()


class AnonymousThrottle(ClientAddressMixin, AnonRateThrottle):
    """Requests without an account (the public schema and docs), per client address."""


class AccountThrottle(ClientAddressMixin, UserRateThrottle):
    """Requests of one operator account, wherever they come from."""


class FailedAuthenticationThrottle(ClientAddressMixin, SimpleRateThrottle):
    """Wrong tokens and passwords from one client address: guessing gets slow, then refused.

    Counted only when credentials fail (see config.authentication), so a client
    that authenticates is never slowed by it; but once an address has used up
    its failures, even right credentials from it wait for the window to pass.
    """

    scope = "failed_authentication"
    # Set by SimpleRateThrottle.__init__ from the scope's rate; missing from djangorestframework-stubs.
    num_requests: int
    duration: int

    def get_cache_key(self, request, view) -> str:
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}

    def allow_request(self, request, view) -> bool:
        self.key = self.get_cache_key(request, view)
        self.history = self.cache.get(self.key, [])
        self.now = self.timer()
        while self.history and self.history[-1] <= self.now - self.duration:
            self.history.pop()
        return len(self.history) < self.num_requests

    def record_failure(self) -> None:
        """Count one failure (after allow_request has read this address's history)."""
        self.history.insert(0, self.now)
        self.cache.set(self.key, self.history, self.duration)


class PersonalPageThrottle(ClientAddressMixin, SimpleRateThrottle):
    """Requests to the people's own pages (people/) from one client address, wrong links included.

    Outside the API (plain Django views call allow_request themselves), so the key needs no view.
    """

    scope = "personal_page"

    def get_cache_key(self, request, view) -> str:
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}
