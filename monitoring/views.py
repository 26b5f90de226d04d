"""Health probes and /metrics: plain Django views, outside the API and its authentication."""

from django.http import HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe
from prometheus_client.exposition import choose_encoder

from monitoring.access import MetricsAccess, metrics_access
from monitoring.collectors import DatabaseCollector
from monitoring.selectors import readiness


@never_cache
@require_safe
def live(request):
    """The process answers HTTP. Touches nothing else, so a database outage never restarts the web."""
    return JsonResponse({"status": "alive"})


@never_cache
@require_safe
def ready(request):
    """200 when the database answers and is migrated; 503 with the reason otherwise."""
    result = readiness()
    return JsonResponse(result.as_json(), status=200 if result.ready else 503)


@never_cache
@require_safe
def metrics(request):
    """The database-wide gauges in Prometheus text format, for a token holder or an allowed address."""
    access = metrics_access(request=request)
    if access is MetricsAccess.UNAUTHENTICATED:
        response = HttpResponse("Authentication required.\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    if access is MetricsAccess.FORBIDDEN:
        return HttpResponse("Forbidden.\n", status=403, content_type="text/plain")
    # Prometheus's own negotiation: the text format, or OpenMetrics when the scraper asks for it.
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    return HttpResponse(encoder(DatabaseCollector(now=timezone.now())), content_type=content_type)
