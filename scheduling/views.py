from drf_spectacular.utils import OpenApiExample, extend_schema, extend_schema_view
from rest_framework import mixins, viewsets

from scheduling.models import EventTypePause
from scheduling.serializers import EventTypePauseSerializer
from scheduling.services.pauses import event_type_pause, event_type_resume


@extend_schema_view(
    list=extend_schema(summary="List the event types and whether each is paused"),
    retrieve=extend_schema(summary="Read whether an event type is paused"),
    partial_update=extend_schema(
        summary="Pause or resume an event type's messages",
        description=(
            "For every recipient. Pausing one already paused, or resuming one not paused, changes nothing. "
            "A recipient's own pause is the recipient's `paused`."
        ),
        examples=[OpenApiExample("Pause", value={"paused": True}, request_only=True)],
    ),
)
class EventTypePauseViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.UpdateModelMixin, viewsets.GenericViewSet
):
    """Event types: whether each one's messages go out."""

    queryset = EventTypePause.objects.order_by("event_type")
    serializer_class = EventTypePauseSerializer
    lookup_field = "event_type"
    http_method_names = ["get", "patch", "head", "options"]

    def perform_update(self, serializer):
        change = event_type_pause if serializer.validated_data["paused"] else event_type_resume
        serializer.instance = change(
            event_type=serializer.instance.event_type, by=self.request.user.get_username()
        )
