import json

from django.db import connection
from django.http import JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from config.urls import urlpatterns as product_urlpatterns


@csrf_exempt
@require_POST
def bare_insert(request):
    body = json.loads(request.body)
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO bench_bare_insert (body) VALUES (%s) RETURNING id", [json.dumps(body)])
        (new_id,) = cursor.fetchone()
    return JsonResponse({"id": new_id}, status=201)


urlpatterns = [path("bench/bare-insert/", bare_insert), *product_urlpatterns]
