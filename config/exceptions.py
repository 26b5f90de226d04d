from django.core.exceptions import RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework.response import Response
from rest_framework.views import exception_handler


def api_exception_handler(exc, context):
    """DRF's handler, plus the Django exceptions a service may raise for bad input.

    RequestDataTooBig: a body Django refused to read (413). ValidationError: the
    services validate again under a row lock, and a concurrent edit can make
    input the serializer accepted invalid by then (400, never 500).
    """
    if isinstance(exc, RequestDataTooBig):
        return Response({"detail": "Request body is too large."}, status=413)
    if isinstance(exc, DjangoValidationError):
        detail = exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
        return Response(detail, status=400)
    return exception_handler(exc, context)
