from datetime import timedelta
from functools import partial

from django.http import HttpResponse
from django.urls import reverse
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import APIException, NotFound, ValidationError
from rest_framework.generics import get_object_or_404
from rest_framework.permissions import SAFE_METHODS, AllowAny, BasePermission
from rest_framework.response import Response
from rest_framework.views import APIView

from config.openapi import VALIDATION_ERROR_SCHEMA
from config.permissions import ModelPermissions
from config.preconditions import PreconditionFailed, etag_for, if_match_versions
from config.throttling import AnonymousThrottle
from delivery.actions import recovery
from delivery.actions.failures import failure_group_acknowledge, failure_group_resend
from delivery.actions.ping import destination_send_test
from delivery.api.schema import destination_schema, recovery_schema
from delivery.api.serializers import (
    CalendarFeedSerializer,
    DestinationHealthSerializer,
    DestinationSecretSerializer,
    DestinationSerializer,
    DestinationUpdateSerializer,
    FailureGroupActionSerializer,
    FailureGroupResendSerializer,
    FailureGroupSerializer,
    PingResultSerializer,
    RecoveryPreviewSerializer,
    RecoveryRequestSerializer,
    RecoverySerializer,
    RevealedUrlSerializer,
    RotateSecretSerializer,
    UpcomingPageSerializer,
    UpcomingQuerySerializer,
)
from delivery.destinations import services
from delivery.destinations.fields import DestinationSettings
from delivery.destinations.selectors import destination_endpoints, destination_list, destinations_health
from delivery.models import Destination, Recovery
from delivery.selectors import FAILURE_WINDOW, failure_groups, recovery_list
from delivery.upcoming.feeds import (
    calendar_feed_destination,
    calendar_feed_issue,
    calendar_feed_revoke,
)
from delivery.upcoming.ics import calendar_feed_ics
from delivery.upcoming.selectors import PAGE_SIZE, UPCOMING_DAYS_DEFAULT, UpcomingFilterError, upcoming_list
from scheduling.exceptions import InvalidStateTransition


class Conflict(APIException):
    status_code = 409
    default_code = "conflict"


class ChangeDestinationPermission(ModelPermissions):
    """The actions (rotate a secret, pause, resume, send a test message) act on a destination: POST needs
    `change`, not `add`."""

    perms_map = {**ModelPermissions.perms_map, "POST": ["%(app_label)s.change_%(model_name)s"]}


class CalendarFeedPermission(ChangeDestinationPermission):
    """Issuing and revoking a destination's feed changes the destination: both need `change`."""

    perms_map = {**ChangeDestinationPermission.perms_map, "DELETE": ["%(app_label)s.change_%(model_name)s"]}


# An action on one destination: a POST to /destinations/<id>/<its name>/, allowed to whoever may change it.
destination_action = partial(
    action, detail=True, methods=["post"], permission_classes=[ChangeDestinationPermission]
)


@destination_schema
class DestinationViewSet(viewsets.ModelViewSet):
    """Destinations: where greetings go, for which event types, in which format and at what pace."""

    serializer_class = DestinationSerializer
    http_method_names = ["get", "post", "put", "patch", "delete", "head", "options"]

    def get_queryset(self):
        return destination_list()

    def get_serializer_context(self):
        # Every destination's endpoint in one query (there are few destinations).
        return {
            **super().get_serializer_context(),
            "endpoints": destination_endpoints(destinations=destination_list()),
        }

    def handle_exception(self, exc):
        if isinstance(exc, services.DestinationInUse | InvalidStateTransition):
            exc = Conflict(str(exc))
        elif isinstance(exc, services.DestinationVersionMismatch):
            exc = PreconditionFailed(
                f"The destination has changed since the version given in If-Match; it is now at "
                f"version {exc.current_version} (ETag {etag_for(version=exc.current_version)})."
            )
        elif isinstance(exc, Destination.DoesNotExist):  # deleted while this request waited
            exc = NotFound()
        return super().handle_exception(exc)

    def _operator(self) -> str:
        return self.request.user.get_username()

    def _answer(self, destination, *, code=status.HTTP_200_OK, secret: str | None = None) -> Response:
        destination = self.get_queryset().get(pk=destination.pk)
        data = self.get_serializer(destination).data
        if secret is not None:
            # The only answer that ever carries it.
            data = {**data, "secret": secret}
        response = Response(data, status=code)
        response["ETag"] = etag_for(version=destination.version)
        return response

    def _expected_versions(self):
        return if_match_versions(self.request.headers.get("If-Match"))

    def retrieve(self, request, *args, **kwargs):
        return self._answer(self.get_object())

    def create(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        given = dict(serializer.validated_data)
        secret = given.pop("secret", None)
        created = services.destination_create(
            settings=DestinationSettings(**given), operator=self._operator(), secret=secret
        )
        return self._answer(created.destination, code=status.HTTP_201_CREATED, secret=created.value)

    def update(self, request, *args, **kwargs):
        destination = self.get_object()
        serializer = DestinationUpdateSerializer(
            destination,
            data=request.data,
            partial=kwargs.get("partial", False),
            context=self.get_serializer_context(),
        )
        serializer.is_valid(raise_exception=True)
        updated = services.destination_update(
            destination=destination,
            operator=self._operator(),
            changes=serializer.validated_data,
            expected_versions=self._expected_versions(),
        )
        return self._answer(updated)

    def perform_destroy(self, instance):
        services.destination_delete(
            destination=instance, operator=self._operator(), expected_versions=self._expected_versions()
        )

    @destination_action(url_path="rotate-secret")
    def rotate_secret(self, request, pk=None):
        destination = self.get_object()
        serializer = RotateSecretSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        rotated = services.destination_rotate_secret(
            destination=destination, operator=self._operator(), secret=serializer.validated_data.get("secret")
        )
        secrets = rotated.destination.secrets.order_by("-created_at", "-id")
        return Response(
            {"secret": rotated.value, "secrets": DestinationSecretSerializer(secrets, many=True).data}
        )

    @destination_action(url_path="reveal-url")
    def reveal_url(self, request, pk=None):
        """The whole receiver URL, for a caller allowed to change the destination (every other answer shows it
        redacted); never cached."""
        url = services.destination_url_reveal(destination=self.get_object(), operator=self._operator())
        response = Response(RevealedUrlSerializer({"url": url}).data)
        response["Cache-Control"] = "no-store"
        return response

    @action(
        detail=True,
        methods=["post", "delete"],
        url_path="calendar-feed",
        permission_classes=[CalendarFeedPermission],
    )
    def calendar_feed(self, request, pk=None):
        """POST: issue the destination's calendar feed (its URL in the answer, this once; any URL before stops
        working). DELETE: revoke it."""
        destination = self.get_object()
        if request.method == "DELETE":
            if not calendar_feed_revoke(destination=destination):
                raise NotFound("The destination has no calendar feed.")
            return Response(status=status.HTTP_204_NO_CONTENT)
        token = calendar_feed_issue(destination=destination, operator=self._operator(), now=timezone.now())
        url = request.build_absolute_uri(reverse("calendar-feed", kwargs={"token": token}))
        response = Response(CalendarFeedSerializer({"url": url}).data, status=status.HTTP_201_CREATED)
        response["Cache-Control"] = "no-store"
        return response

    @destination_action()
    def pause(self, request, pk=None):
        destination = self.get_object()
        services.destination_pause(destination=destination, operator=self._operator())
        return self._answer(destination)

    @destination_action()
    def resume(self, request, pk=None):
        destination = self.get_object()
        services.destination_resume(destination=destination, operator=self._operator())
        return self._answer(destination)

    @destination_action()
    def test(self, request, pk=None):
        # Whatever the receiver answered, this request succeeded: its 500 is data here, not our error.
        result = destination_send_test(destination=self.get_object(), operator=self._operator())
        return Response(PingResultSerializer(result).data)


class RecoveryPermission(BasePermission):
    """A destination's recoveries: reading them needs `view_destination`, asking for or cancelling one `change`."""

    def has_permission(self, request, view):
        if not (request.user and request.user.is_authenticated):
            return False
        action = "view" if request.method in SAFE_METHODS else "change"
        return request.user.has_perm(f"delivery.{action}_destination")


@recovery_schema
class DestinationRecoveryViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """A destination's recoveries: its deliveries in chosen states between two instants, sent again by the workers."""

    serializer_class = RecoverySerializer
    permission_classes = [RecoveryPermission]
    lookup_value_regex = "[0-9]+"
    # What the OpenAPI description reads the model from; the rows come from get_queryset.
    queryset = Recovery.objects.none()

    def _destination(self) -> Destination:
        return get_object_or_404(Destination, pk=self.kwargs["destination_pk"])

    def get_queryset(self):
        return recovery_list(destination_id=self._destination().pk)

    def handle_exception(self, exc):
        if isinstance(exc, recovery.RecoveryRefused | InvalidStateTransition):
            exc = Conflict(str(exc))
        elif isinstance(exc, Destination.DoesNotExist):  # deleted while this request waited
            exc = NotFound()
        return super().handle_exception(exc)

    def create(self, request, *args, **kwargs):
        destination = self._destination()
        serializer = RecoveryRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        values = dict(serializer.validated_data)
        if values.pop("dry_run"):
            count = recovery.recovery_preview(destination=destination, **values)
            return Response(RecoveryPreviewSerializer({"dry_run": True, "count": count, **values}).data)
        created = recovery.recovery_create(
            destination=destination, operator=request.user.get_username(), **values
        )
        return Response(RecoverySerializer(created).data, status=status.HTTP_201_CREATED)

    @action(detail=True, methods=["post"])
    def cancel(self, request, *args, **kwargs):
        cancelled = recovery.recovery_cancel(recovery=self.get_object(), operator=request.user.get_username())
        return Response(RecoverySerializer(cancelled).data)


# --- health and failures by cause --------------------------------------------------------------

FAILURE_WINDOWS = {"1h": timedelta(hours=1), "24h": timedelta(days=1), "7d": FAILURE_WINDOW}


class DestinationFailuresPermission(RecoveryPermission):
    """As for recoveries: reading a destination's health and failures needs `view_destination`, acting on a
    group (acknowledge, resend) `change_destination`."""


@extend_schema(
    parameters=[
        OpenApiParameter("window", str, enum=list(FAILURE_WINDOWS), description="How far back (default 7d)."),
        OpenApiParameter("destination", int, description="Only this destination's groups."),
    ],
    responses={
        200: FailureGroupSerializer(many=True),
        400: OpenApiResponse(
            response=VALIDATION_ERROR_SCHEMA, description="An unknown window or destination."
        ),
    },
)
class FailureGroupListView(APIView):
    """Dead deliveries by (destination, cause), not acknowledged, newest group first."""

    permission_classes = [DestinationFailuresPermission]

    def get(self, request):
        window = request.query_params.get("window", "7d")
        if window not in FAILURE_WINDOWS:
            raise ValidationError({"window": [f"One of {', '.join(FAILURE_WINDOWS)}."]})
        destination = request.query_params.get("destination")
        if destination is not None and not destination.isdigit():
            raise ValidationError({"destination": ["A destination's id."]})
        now = timezone.now()
        groups = failure_groups(
            now=now,
            since=now - FAILURE_WINDOWS[window],
            destination_id=int(destination) if destination else None,
        )
        return Response(FailureGroupSerializer(groups, many=True).data)


@extend_schema(request=FailureGroupActionSerializer, responses=FailureGroupSerializer(many=True))
class FailureGroupAcknowledgeView(APIView):
    """Acknowledge a group: its failures until `through` leave the list until one more fails this way."""

    permission_classes = [DestinationFailuresPermission]

    def post(self, request):
        serializer = FailureGroupActionSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        now = timezone.now()
        data = serializer.validated_data
        failure_group_acknowledge(
            destination=data["destination"],
            cause=data["cause"],
            through=data.get("through") or now,
            operator=request.user.get_username(),
            now=now,
        )
        groups = failure_groups(now=now, destination_id=data["destination"].pk)
        return Response(FailureGroupSerializer(groups, many=True).data)


@extend_schema(request=FailureGroupActionSerializer, responses=FailureGroupResendSerializer)
class FailureGroupResendView(APIView):
    """Queue a group's dead deliveries again (500 at most per call; `remaining` says how many are left)."""

    permission_classes = [DestinationFailuresPermission]

    def post(self, request):
        serializer = FailureGroupActionSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        result = failure_group_resend(
            destination=data["destination"],
            cause=data["cause"],
            operator=request.user.get_username(),
            now=timezone.now(),
        )
        return Response(FailureGroupResendSerializer(result).data)


@extend_schema(responses=DestinationHealthSerializer(many=True))
class DestinationHealthView(APIView):
    """Every destination's health: its condition, dead deliveries in the last hour and day, last failure, last delivery."""

    permission_classes = [DestinationFailuresPermission]

    def get(self, request):
        return Response(DestinationHealthSerializer(destinations_health(now=timezone.now()), many=True).data)


class UpcomingPermission(BasePermission):
    """Who is greeted where names the recipients and the destinations: reading needs `view_user` and
    `view_destination`, as the console's page does."""

    def has_permission(self, request, view):
        return bool(
            request.user
            and request.user.is_authenticated
            and request.user.has_perms(("users.view_user", "delivery.view_destination"))
        )


@extend_schema(
    parameters=[UpcomingQuerySerializer],
    responses={
        200: UpcomingPageSerializer,
        400: OpenApiResponse(
            response=VALIDATION_ERROR_SCHEMA,
            description="A value out of range or unknown (days, destination, label, type, cursor, limit): "
            "the field is named.",
        ),
    },
)
class UpcomingListView(APIView):
    """What will be sent in the next days, soonest first: per occurrence who, what, where, when and in which
    words, or why it is left out; a page at a time (`next_cursor`)."""

    permission_classes = [UpcomingPermission]

    def get(self, request):
        # A plain dict, not the QueryDict: DRF would read an empty value (`?type=`) as absent, which the
        # document does not allow.
        query = UpcomingQuerySerializer(data=request.query_params.dict())
        query.is_valid(raise_exception=True)
        given = query.validated_data
        try:
            page = upcoming_list(
                now=timezone.now(),
                days=given.get("days", UPCOMING_DAYS_DEFAULT),
                destination_id=given.get("destination"),
                label=given.get("label"),
                event_type=given.get("type"),
                cursor=given.get("cursor"),
                limit=given.get("limit", PAGE_SIZE),
            )
        except UpcomingFilterError as exc:
            raise ValidationError({exc.field: [str(exc)]}) from exc
        return Response(UpcomingPageSerializer(page).data)


@extend_schema(exclude=True)
class CalendarFeedView(APIView):
    """A destination's calendar feed (delivery.upcoming.feeds): the token is the credential, so no account.

    Any token but the destination's current one: a bare 404, the same for a revoked one and a guess.
    """

    authentication_classes: list = []
    permission_classes = [AllowAny]
    throttle_classes = [AnonymousThrottle]

    def get(self, request, token: str):
        destination = calendar_feed_destination(token=token)
        if destination is None:
            raise NotFound()
        response = HttpResponse(
            calendar_feed_ics(destination=destination, now=timezone.now()),
            content_type="text/calendar; charset=utf-8",
        )
        # Computed at each fetch, and a credential in its URL: kept by no cache, sent on by no link.
        response["Cache-Control"] = "no-store"
        response["Referrer-Policy"] = "no-referrer"
        return response
