from rest_framework.authentication import TokenAuthentication
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
            return super().authenticate(request)
        except AuthenticationFailed:
            throttle.record_failure()
            raise
