from rest_framework import permissions, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.response import Response
from rest_framework.settings import api_settings

from config.preconditions import PreconditionFailed, etag_for, if_match_versions
from scheduling.celebration import ChangedBy
from users import services
from users.models import User
from users.schema import user_schema
from users.selectors import user_events, user_export, user_list
from users.serializers import EventSerializer, UserSerializer


class CanViewEvents(permissions.BasePermission):
    """A recipient's events are event rows: reading them needs `scheduling.view_event` too."""

    def has_permission(self, request, view) -> bool:
        return request.user.has_perm("scheduling.view_event")


class CanExport(permissions.BasePermission):
    """An export holds the recipient's events and deliveries: it needs the permission to view each."""

    def has_permission(self, request, view) -> bool:
        return request.user.has_perms(["scheduling.view_event", "delivery.view_delivery"])


class CanIssueLink(permissions.BasePermission):
    """A link lets the person change their choices: issuing one needs `change recipient` (POST asks only `add`)."""

    def has_permission(self, request, view) -> bool:
        return request.user.has_perm("users.change_user")


@user_schema
class UserViewSet(viewsets.ModelViewSet):
    """Recipients: create, list, read, replace, patch, delete, and their events."""

    serializer_class = UserSerializer
    http_method_names = ["get", "post", "put", "patch", "delete", "head", "options"]

    def get_queryset(self):
        if self.action == "list":
            return user_list(
                external_id=self.request.query_params.get("external_id"),
                labels=self.request.query_params.getlist("label"),
            )
        return user_list()

    def perform_create(self, serializer):
        serializer.instance = services.user_create(
            **serializer.validated_data, by=self.request.user.get_username(), changed_by=ChangedBy.API_CLIENT
        )

    def perform_update(self, serializer):
        services.user_update(
            user=serializer.instance,
            data=serializer.validated_data,
            expected_versions=if_match_versions(self.request.headers.get("If-Match")),
            by=self.request.user.get_username(),
            changed_by=ChangedBy.API_CLIENT,
        )

    def perform_destroy(self, instance):
        services.user_erase(
            user=instance, expected_versions=if_match_versions(self.request.headers.get("If-Match"))
        )

    def handle_exception(self, exc):
        if isinstance(exc, services.VersionMismatch):
            exc = PreconditionFailed(
                f"The recipient has changed since the version given in If-Match; it is now at "
                f"version {exc.current_version} (ETag {etag_for(version=exc.current_version)})."
            )
        elif isinstance(exc, User.DoesNotExist):  # deleted while this request waited for its lock
            exc = NotFound()
        return super().handle_exception(exc)

    def retrieve(self, request, *args, **kwargs):
        return self._with_etag(super().retrieve(request, *args, **kwargs))

    def update(self, request, *args, **kwargs):
        super().update(request, *args, **kwargs)
        # Render from a fresh read so next_event shows the rescheduled event.
        user = self.get_queryset().get(pk=kwargs["pk"])
        return self._with_etag(Response(self.get_serializer(user).data))

    def create(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        self.perform_create(serializer)
        # The new user carries its just-created events (pending_events): no re-read.
        response = Response(self.get_serializer(serializer.instance).data, status=status.HTTP_201_CREATED)
        return self._with_etag(response)

    @staticmethod
    def _with_etag(response: Response) -> Response:
        # The ETag versions the recipient's own fields, what PUT/PATCH/DELETE change;
        # next_event is derived from them and moves on as messages are sent.
        response["ETag"] = etag_for(version=response.data["version"])
        return response

    @action(
        detail=True,
        methods=["get"],
        permission_classes=[*api_settings.DEFAULT_PERMISSION_CLASSES, CanViewEvents],
    )
    def events(self, request, pk=None, format=None):
        # `format` arrives from the router's suffix routes (`/events.json`, `/events.api`);
        # the renderer has already been chosen from it by then.
        user = self.get_object()
        page = self.paginate_queryset(user_events(user_id=user.pk))
        return self.get_paginated_response(EventSerializer(page, many=True).data)

    @action(
        detail=True, methods=["get"], permission_classes=[*api_settings.DEFAULT_PERMISSION_CLASSES, CanExport]
    )
    def export(self, request, pk=None, format=None):
        # Everything about a person: no cache on the way (a proxy, the browser's disk) may keep a copy
        # that outlives their erasure.
        return Response(user_export(user_id=self.get_object().pk), headers={"Cache-Control": "no-store"})

    @action(
        detail=True,
        methods=["post"],
        url_path="personal-link",
        permission_classes=[*api_settings.DEFAULT_PERMISSION_CLASSES, CanIssueLink],
    )
    def personal_link(self, request, pk=None, format=None):
        # The URL is shown once, here: nothing on the way may keep it (it opens the person's page).
        issued = services.personal_link_issue(
            user_id=self.get_object().pk, issued_by=ChangedBy.API_CLIENT, actor=request.user.get_username()
        )
        return Response(
            {"url": issued.url, "expires_at": issued.expires_at},
            status=status.HTTP_201_CREATED,
            headers={"Cache-Control": "no-store"},
        )
