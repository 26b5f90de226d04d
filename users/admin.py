from django.contrib import admin

from users import services
from users.models import User


@admin.register(User)
class RecipientAdmin(admin.ModelAdmin):
    list_display = ["first_name", "last_name", "timezone", "date_of_birth", "created_at"]
    search_fields = ["first_name", "last_name", "=id"]
    list_filter = ["timezone"]
    readonly_fields = ["id", "created_at", "updated_at"]

    def save_model(self, request, obj, form, change):
        fields = {f: form.cleaned_data[f] for f in services.USER_FIELDS}
        if change:
            services.user_update(user=obj, data=fields)
        else:
            obj.pk = services.user_create(**fields).pk
