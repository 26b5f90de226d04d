from django.conf import settings
from django.http import JsonResponse


class RequestBodyLimitMiddleware:
    """Refuse request bodies the application could not read whole: too large, or unframed.

    Too large: bodies over API_MAX_BODY_BYTES (ESP_WEBHOOK_MAX_BODY_BYTES under /esp/, where an
    ESP posts batches of events) get a 413. Django's
    DATA_UPLOAD_MAX_MEMORY_SIZE also guards reads, but it surfaces as a generic
    400; a declared oversize body deserves the precise status, and is refused
    before a byte of it is read.

    Unframed: a body sent with `Transfer-Encoding` (chunked) and no length gets a
    411. WSGI gives Django such a body as zero bytes, so a chunked PATCH would
    answer 200 having changed nothing, and a chunked POST would report every
    field missing. Refusing is also what keeps a request whose length two
    parsers could read differently (both headers present) from being smuggled
    past a proxy.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.META.get("HTTP_TRANSFER_ENCODING", "").strip().lower() not in ("", "identity"):
            return JsonResponse(
                {
                    "detail": (
                        "Transfer-Encoding is not supported: send the body with a Content-Length header."
                    )
                },
                status=411,
            )
        try:
            declared = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return JsonResponse({"detail": "Invalid Content-Length header."}, status=400)
        limit = (
            settings.ESP_WEBHOOK_MAX_BODY_BYTES
            if request.path.startswith("/esp/")
            else settings.API_MAX_BODY_BYTES
        )
        if declared > limit:
            return JsonResponse(
                {"detail": f"Request body of {declared} bytes is larger than the {limit} bytes allowed."},
                status=413,
            )
        return self.get_response(request)
