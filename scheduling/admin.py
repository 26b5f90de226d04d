from django.contrib import admin

from scheduling.models import Event


@admin.register(Event)
class EventAdmin(admin.ModelAdmin):
    list_display = ["user", "event_type", "occurrence_date", "target_timestamp_utc", "status"]
    list_filter = ["status", "event_type"]
    search_fields = ["=id", "idempotency_key", "user__first_name", "user__last_name"]
    raw_id_fields = ["user"]
