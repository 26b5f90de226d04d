from django.core.exceptions import RequestDataTooBig
from rest_framework.response import Response
from rest_framework.views import exception_handler


def api_exception_handler(exc, context):
    """DRF's handler, plus a 413 for bodies Django refused to read (chunked uploads)."""
    if isinstance(exc, RequestDataTooBig):
        return Response({"detail": "Request body is too large."}, status=413)
    return exception_handler(exc, context)
