from rest_framework import permissions, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response
from rest_framework.settings import api_settings

from users import services
from users.selectors import user_events, user_list
from users.serializers import EventSerializer, UserSerializer


class CanViewEvents(permissions.BasePermission):
    """A recipient's events are event rows: reading them needs `scheduling.view_event` too."""

    def has_permission(self, request, view) -> bool:
        return request.user.has_perm("scheduling.view_event")


class UserViewSet(viewsets.ModelViewSet):
    """Recipients: create, list, read, replace, patch, delete, and their events."""

    serializer_class = UserSerializer
    http_method_names = ["get", "post", "put", "patch", "delete", "head", "options"]

    def get_queryset(self):
        return user_list()

    def perform_create(self, serializer):
        serializer.instance = services.user_create(**serializer.validated_data)

    def perform_update(self, serializer):
        services.user_update(user=serializer.instance, data=serializer.validated_data)

    def update(self, request, *args, **kwargs):
        super().update(request, *args, **kwargs)
        # Render from a fresh read so next_event shows the rescheduled event.
        user = self.get_queryset().get(pk=kwargs["pk"])
        return Response(self.get_serializer(user).data)

    def create(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        self.perform_create(serializer)
        # The new user carries its just-created events (pending_events): no re-read.
        return Response(self.get_serializer(serializer.instance).data, status=status.HTTP_201_CREATED)

    def perform_destroy(self, instance):
        services.user_delete(user=instance)

    @action(detail=True, methods=["get"], permission_classes=[*api_settings.DEFAULT_PERMISSION_CLASSES, CanViewEvents])
    def events(self, request, pk=None, format=None):
        # `format` arrives from the router's suffix routes (`/events.json`, `/events.api`);
        # the renderer has already been chosen from it by then.
        user = self.get_object()
        page = self.paginate_queryset(user_events(user_id=user.pk))
        return self.get_paginated_response(EventSerializer(page, many=True).data)
