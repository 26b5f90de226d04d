from django.conf import settings
from django.http import JsonResponse


class RequestBodyLimitMiddleware:
    """Refuse API request bodies larger than API_MAX_BODY_BYTES with a 413.

    Django's DATA_UPLOAD_MAX_MEMORY_SIZE also guards reads, but it surfaces as a
    generic 400; a declared oversize body deserves the precise status, and is
    refused before a byte of it is read.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        try:
            declared = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return JsonResponse({"detail": "Invalid Content-Length header."}, status=400)
        if declared > settings.API_MAX_BODY_BYTES:
            return JsonResponse(
                {
                    "detail": (
                        f"Request body of {declared} bytes is larger than the "
                        f"{settings.API_MAX_BODY_BYTES} bytes allowed."
                    )
                },
                status=413,
            )
        return self.get_response(request)
