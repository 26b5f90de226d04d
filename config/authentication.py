from rest_framework.authentication import TokenAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed, Throttled

from config.throttling import FailedAuthenticationThrottle


class ThrottledTokenAuthentication(TokenAuthentication):
    """DRF's token authentication, with failed tokens counted per client address.

    DRF checks throttles after authentication, so a request with a wrong token is
    refused (401) before any throttle sees it, and guessing tokens would never be
    slowed down. Here an address that has sent too many wrong tokens gets 429
    with Retry-After instead, until its window has passed.
    """

    def authenticate(self, request):
        throttle = FailedAuthenticationThrottle()
        if not throttle.allow_request(request, None):
            raise Throttled(wait=throttle.wait())
        try:
            found = super().authenticate(request)
            if found is None and _bare(get_authorization_header(request)):
                # A key pasted without its scheme (the docs page's Authorize box takes the header whole):
                # "credentials were not provided" would hide what is wrong with them.
                raise AuthenticationFailed(BARE_TOKEN)
            return found
        except AuthenticationFailed:
            throttle.record_failure()
            raise


BARE_TOKEN = "The Authorization header holds a key without its scheme: send `Authorization: Token <key>`."


def _bare(header: bytes) -> bool:
    """Whether an Authorization header is one word: a key without "Token " before it."""
    words = header.split()
    return len(words) == 1
